//! What the PostgreSQL and MySQL/MariaDB fences share: the table name rule and the
//! conversion of tokens to the `bigint` column.

use crate::error::{Error, Result};
use crate::types::Token;

/// The longest table name (PostgreSQL truncates identifiers at 63 bytes, MySQL refuses more
/// than 64 characters).
const MAX_TABLE_LEN: usize = 63;

/// Checks a table name: an unquoted identifier (`[A-Za-z_][A-Za-z0-9_]*`, at most 63
/// characters), optionally qualified by a schema (`schema.table`); else
/// [`Error::InvalidConfig`] naming the setting `table`.
pub(super) fn check_table(table: &str) -> Result<String> {
    let parts: Vec<&str> = table.split('.').collect();
    let ok = parts.len() <= 2
        && parts.iter().all(|p| {
            let mut chars = p.chars();
            chars
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
                && p.len() <= MAX_TABLE_LEN
        });
    if ok {
        Ok(table.to_owned())
    } else {
        let shown: String = table.chars().take(64).collect();
        Err(Error::config(
            "table",
            format!(
                "{shown:?} is not a table name: use [A-Za-z_][A-Za-z0-9_]* (at most \
                 {MAX_TABLE_LEN} characters), optionally as schema.table"
            ),
        ))
    }
}

/// A token as the `bigint` the table stores; a token above `i64::MAX` (no backend of this
/// crate hands one out) is refused.
pub(super) fn to_bigint(token: Token, backend: &'static str) -> Result<i64> {
    i64::try_from(token.get()).map_err(|_| Error::Unsupported {
        operation: "fencing a token above 2^63 - 1 (the table stores a signed bigint)",
        backend,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_are_plain_identifiers() {
        for ok in ["fence", "app_fence", "_f1", "app.fence", &"x".repeat(63)] {
            assert_eq!(check_table(ok).unwrap(), ok);
        }
        for bad in [
            "",
            "1fence",
            "fence;drop",
            "a.b.c",
            "a.",
            "my-fence",
            "f\"",
            &"x".repeat(64),
        ] {
            assert!(
                matches!(check_table(bad), Err(Error::InvalidConfig { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn tokens_above_the_bigint_range_are_refused() {
        let max = Token::new(i64::MAX as u64).unwrap();
        assert_eq!(to_bigint(max, "postgres").unwrap(), i64::MAX);
        let over = Token::new(i64::MAX as u64 + 1).unwrap();
        assert!(matches!(
            to_bigint(over, "postgres"),
            Err(Error::Unsupported { .. })
        ));
    }
}
