//! Decoding MySQL/MariaDB rows: every value read by hand from the raw [`Value`]s, never
//! with the `mysql` crate's typed conversions (which panic on an unexpected value), so a
//! wrong type, a NULL where none can be or a missing row is a [`DbError`], never a panic.

use crate::backends::sql::driver::{AcqReport, DbError, DbResult, Kind, Renewed};
use ::mysql::{Row, Value};

/// The values of a row (a taken value reads as NULL).
pub(super) fn cells(row: Row) -> Vec<Value> {
    row.unwrap_raw()
        .into_iter()
        .map(|v| v.unwrap_or(Value::NULL))
        .collect()
}

/// Column `i` of `row`; NULL when the row is shorter.
pub(super) fn cell(row: &[Value], i: usize) -> &Value {
    row.get(i).unwrap_or(&Value::NULL)
}

/// An unexpected value (a wrong type, NULL where none can be, a missing row) for `what`.
pub(super) fn bad(what: &str, row: &[Value]) -> DbError {
    let mut shown = format!("{row:?}");
    if shown.len() > 200 {
        let mut end = 200;
        while !shown.is_char_boundary(end) {
            end -= 1;
        }
        shown.truncate(end);
        shown.push('…');
    }
    DbError::new(
        Kind::Other,
        format!("unexpected value from MySQL for {what}: {shown}"),
    )
}

/// Column `i` as an integer, NULL as `None`; any other value is an error.
pub(super) fn opt_int(what: &str, row: &[Value], i: usize) -> DbResult<Option<i64>> {
    match cell(row, i) {
        Value::NULL => Ok(None),
        v => int(v).map(Some).ok_or_else(|| bad(what, row)),
    }
}

/// Column `i` as UTF-8 text, NULL as `None`; any other value is an error.
pub(super) fn opt_text(what: &str, row: &[Value], i: usize) -> DbResult<Option<String>> {
    match cell(row, i) {
        Value::NULL => Ok(None),
        v => text(v).map(Some).ok_or_else(|| bad(what, row)),
    }
}

/// Column `i` as an integer, required.
pub(super) fn req_int(what: &str, row: &[Value], i: usize) -> DbResult<i64> {
    opt_int(what, row, i)?.ok_or_else(|| bad(what, row))
}

/// Column `i` as UTF-8 text, required.
pub(super) fn req_text(what: &str, row: &[Value], i: usize) -> DbResult<String> {
    opt_text(what, row, i)?.ok_or_else(|| bad(what, row))
}

/// Whether `GET_LOCK` granted the lock: 1; 0 (timed out), NULL (an error) or anything
/// else means not.
pub(super) fn lock_granted(row: Option<&[Value]>) -> bool {
    row.and_then(|r| int(cell(r, 0))) == Some(1)
}

/// The remaining µs of a session just opened (`open_read`).
pub(super) fn opened(row: Option<Vec<Value>>) -> DbResult<i64> {
    let row = row.ok_or_else(|| bad("the new session (no row)", &[]))?;
    req_int("the new session's remaining time", &row, 0)
}

/// A keep-alive's read (`ka_read`): no row when the session is gone, else on every row its
/// remaining µs (not positive: expired), the version of its holdings and whether they are
/// listed (0 or 1), with a held lease's or term's name, token and side (NULL, NULL, NULL when
/// it holds none or they are not listed). `rw`: the read-write terms were read.
pub(super) fn renewed(rows: &[Vec<Value>], rw: bool) -> DbResult<Option<Renewed>> {
    const WHAT: &str = "a keep-alive";
    let Some(first) = rows.first() else {
        return Ok(None);
    };
    let remaining_us = req_int(WHAT, first, 0)?;
    if remaining_us <= 0 {
        return Ok(None);
    }
    let version = req_int(WHAT, first, 1)?;
    let listed = match req_int(WHAT, first, 2)? {
        0 => false,
        1 => true,
        _ => return Err(bad(WHAT, first)),
    };
    let mut held = Vec::new();
    for r in rows {
        match (
            opt_text(WHAT, r, 3)?,
            opt_int(WHAT, r, 4)?,
            opt_int(WHAT, r, 5)?,
        ) {
            (Some(name), Some(token), Some(side)) if listed => held.push((name, token, side)),
            (None, None, None) => {}
            _ => return Err(bad(WHAT, r)),
        }
    }
    Ok(Some(Renewed {
        remaining_us,
        version,
        rw,
        held: listed.then_some(held),
    }))
}

/// The new term an acquire's `UPDATE` reported in its OK packet (see `statements::TAKEN`):
/// `(token, remaining µs)` when it changed rows and set a value, `None` otherwise (the
/// lease row is then read). `affected` counts the changed rows (or, with
/// `CLIENT_FOUND_ROWS`, the matched ones: the same here, since a matched lease row always
/// changes, its token does).
pub(super) fn taken(affected: u64, last_insert_id: u64) -> Option<(i64, i64)> {
    if affected == 0 || last_insert_id == 0 {
        return None;
    }
    let token = i64::try_from(last_insert_id >> 31)
        .ok()
        .filter(|t| *t > 0)?;
    let remaining_ms = i64::try_from(last_insert_id & 0x7fff_ffff).ok()?;
    Some((token, remaining_ms * 1000))
}

/// What a keep-alive's `UPDATE` reported in its OK packet (see `statements::RENEWED`):
/// `(version, remaining µs)` when it matched the session's live row and set a value, `None`
/// otherwise (no row changed, which is also a renewal to the same ms: the row is then read).
pub(super) fn renewal(affected: u64, last_insert_id: u64) -> Option<(i64, i64)> {
    if affected == 0 || last_insert_id == 0 {
        return None;
    }
    let version = i64::try_from(last_insert_id >> 31).ok()?.checked_sub(1)?;
    let remaining_ms = i64::try_from(last_insert_id & 0x7fff_ffff).ok()?;
    (version >= 0 && remaining_ms > 0).then_some((version, remaining_ms * 1000))
}

/// The report read after an acquire's `UPDATE` (`acquire_report`): always one row, NULLs
/// where the session or the lease row is missing.
pub(super) fn acq_report(row: Option<Vec<Value>>) -> DbResult<AcqReport> {
    const WHAT: &str = "an acquire";
    let row = row.ok_or_else(|| bad(WHAT, &[]))?;
    Ok(AcqReport {
        my_remaining: opt_int(WHAT, &row, 0)?,
        new_token: None,
        holder: opt_text(WHAT, &row, 1)?,
        token: opt_int(WHAT, &row, 2)?,
        holder_remaining: opt_int(WHAT, &row, 3)?,
    })
}

/// A live holder (`owner`): session, token, remaining µs, all required.
pub(super) fn holder(row: Option<Vec<Value>>) -> DbResult<Option<(String, i64, i64, String)>> {
    const WHAT: &str = "a lease owner";
    let Some(row) = row else {
        return Ok(None);
    };
    Ok(Some((
        req_text(WHAT, &row, 0)?,
        req_int(WHAT, &row, 1)?,
        req_int(WHAT, &row, 2)?,
        req_text(WHAT, &row, 3)?,
    )))
}

/// `join_check`: whether the session is live (a count of 1).
pub(super) fn live(row: Option<Vec<Value>>) -> DbResult<bool> {
    const WHAT: &str = "a session check";
    let row = row.ok_or_else(|| bad(WHAT, &[]))?;
    Ok(req_int(WHAT, &row, 0)? == 1)
}

/// A member row: session id and metadata, both required text.
pub(super) fn member(row: &[Value]) -> DbResult<(String, String)> {
    const WHAT: &str = "a group member";
    Ok((req_text(WHAT, row, 0)?, req_text(WHAT, row, 1)?))
}

pub(super) fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        Value::UInt(u) => i64::try_from(*u).ok(),
        Value::Bytes(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        _ => None,
    }
}

pub(super) fn text(v: &Value) -> Option<String> {
    match v {
        Value::Bytes(b) => String::from_utf8(b.clone()).ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unexpected_values_are_errors_not_panics() {
        use Value::{Bytes, Int, NULL};
        let b = |s: &[u8]| Bytes(s.to_vec());
        // GET_LOCK: 1 only; NULL (an error on the server), 0, garbage or no row: not granted.
        assert!(lock_granted(Some(&[Int(1)])));
        assert!(lock_granted(Some(&[b(b"1")])));
        for row in [&[NULL][..], &[Int(0)], &[b(b"\xff")], &[]] {
            assert!(!lock_granted(Some(row)), "{row:?}");
        }
        assert!(!lock_granted(None));
        // A new session's remaining time: required.
        assert_eq!(opened(Some(vec![Int(5)])).unwrap(), 5);
        for row in [
            None,
            Some(vec![NULL]),
            Some(vec![b(b"\xff\xfe")]),
            Some(vec![]),
        ] {
            assert!(opened(row.clone()).is_err(), "{row:?}");
        }
        // Keep-alive rows: remaining, version, listed, name, token, side.
        let ka = |rem: i64, v: i64, held: Option<Vec<(&str, i64, i64)>>| {
            Some(Renewed {
                remaining_us: rem,
                version: v,
                rw: true,
                held: held.map(|l| {
                    l.into_iter()
                        .map(|(n, t, side)| (n.to_owned(), t, side))
                        .collect()
                }),
            })
        };
        let renewed = |rows: &[Vec<Value>]| renewed(rows, true);
        assert_eq!(renewed(&[]).unwrap(), None);
        assert_eq!(
            renewed(&[vec![Int(-3), Int(1), Int(1), NULL, NULL, NULL]]).unwrap(),
            None
        );
        assert_eq!(
            renewed(&[vec![Int(10), Int(4), Int(1), NULL, NULL, NULL]]).unwrap(),
            ka(10, 4, Some(vec![]))
        );
        assert_eq!(
            renewed(&[vec![Int(10), Int(4), Int(0), NULL, NULL, NULL]]).unwrap(),
            ka(10, 4, None)
        );
        assert_eq!(
            renewed(&[
                vec![Int(10), Int(4), Int(1), b(b"job"), Int(3), Int(-1)],
                vec![Int(10), Int(4), Int(1), b(b"job"), Int(5), Int(1)],
            ])
            .unwrap(),
            ka(10, 4, Some(vec![("job", 3, -1), ("job", 5, 1)]))
        );
        for rows in [
            vec![vec![NULL, Int(1), Int(1), NULL, NULL, NULL]],
            vec![vec![b(b"ten"), Int(1), Int(1), NULL, NULL, NULL]],
            vec![vec![Int(10), NULL, Int(1), NULL, NULL, NULL]],
            vec![vec![Int(10), Int(1), NULL, NULL, NULL, NULL]],
            vec![vec![Int(10), Int(1), Int(2), NULL, NULL, NULL]],
            vec![vec![Int(10), Int(1), Int(0), b(b"job"), Int(3), Int(-1)]],
            vec![vec![
                Int(10),
                Int(1),
                Int(1),
                b(b"\xff\xfe"),
                Int(3),
                Int(-1),
            ]],
            vec![vec![Int(10), Int(1), Int(1), b(b"job"), NULL, Int(-1)]],
            vec![vec![Int(10), Int(1), Int(1), NULL, Int(3), Int(-1)]],
            vec![vec![Int(10), Int(1), Int(1), b(b"job"), Int(3), NULL]],
            vec![vec![
                Int(10),
                Int(1),
                Int(1),
                b(b"job"),
                b(b"three"),
                Int(-1),
            ]],
        ] {
            assert!(renewed(&rows).is_err(), "{rows:?}");
        }
        // The new term in an acquire's OK packet: token << 31 | remaining ms.
        assert_eq!(taken(2, (7 << 31) | 1500), Some((7, 1_500_000)));
        assert_eq!(
            taken(3, (1 << 31) | 0x7fff_ffff),
            Some((1, 0x7fff_ffff * 1000))
        );
        assert_eq!(taken(2, 1 << 31), Some((1, 0)));
        assert_eq!(taken(0, (7 << 31) | 1500), None, "no row changed");
        assert_eq!(taken(2, 0), None, "a token too large to encode");
        assert_eq!(taken(2, 1500), None, "no token");
        assert_eq!(
            taken(2, u64::MAX),
            Some(((1 << 33) - 1, 0x7fff_ffff * 1000))
        );
        // A keep-alive's OK packet: version + 1 above bit 31, the remaining ms below.
        assert_eq!(renewal(1, (1 << 31) | 900), Some((0, 900_000)));
        assert_eq!(renewal(1, (8 << 31) | 900), Some((7, 900_000)));
        assert_eq!(renewal(0, (8 << 31) | 900), None, "no row changed: read it");
        assert_eq!(renewal(1, 0), None, "a version too large to encode");
        assert_eq!(renewal(1, 900), None, "no version");
        assert_eq!(renewal(1, 8 << 31), None, "no time left");
        assert_eq!(
            renewal(1, u64::MAX),
            Some(((1 << 33) - 2, 0x7fff_ffff * 1000))
        );
        // The acquire report: one row, NULLs allowed, wrong types not.
        assert!(acq_report(Some(vec![NULL, NULL, NULL, NULL])).is_ok());
        assert!(acq_report(None).is_err());
        assert!(acq_report(Some(vec![Int(1), b(b"\xff"), Int(2), NULL])).is_err());
        assert!(acq_report(Some(vec![Int(1), b(b"s"), b(b"x"), NULL])).is_err());
        // Owner, session check, members.
        assert_eq!(holder(None).unwrap(), None);
        assert!(holder(Some(vec![b(b"s"), NULL, Int(1)])).is_err());
        assert!(holder(Some(vec![b(b"s"), Int(1)])).is_err());
        assert!(live(Some(vec![NULL])).is_err());
        assert!(live(None).is_err());
        assert!(live(Some(vec![Int(1)])).unwrap());
        assert!(member(&[b(b"s"), b(b"\xff")]).is_err());
        assert!(member(&[b(b"s"), NULL]).is_err());
        assert_eq!(
            member(&[b(b"s"), b(b"m")]).unwrap(),
            ("s".to_owned(), "m".to_owned())
        );
    }
}
