//! The table names under a prefix, and the schema scripts rewritten for it: every statement
//! of both dialects names its tables through [`Tables`], so several installations can share
//! one database.

/// The full table names for a prefix.
#[derive(Clone, Debug)]
pub(crate) struct Tables {
    pub(crate) prefix: String,
    pub(crate) session: String,
    pub(crate) lease: String,
    pub(crate) member: String,
    pub(crate) queue: String,
    pub(crate) job: String,
    /// Read-write locks: the name's token counter, its terms, its waiting writers.
    pub(crate) rw: String,
    pub(crate) rw_holder: String,
    pub(crate) rw_waiter: String,
}

impl Tables {
    pub(crate) fn new(prefix: &str) -> Self {
        Tables {
            prefix: prefix.to_owned(),
            session: format!("{prefix}simba_session"),
            lease: format!("{prefix}simba_lease"),
            member: format!("{prefix}simba_member"),
            queue: format!("{prefix}simba_queue"),
            job: format!("{prefix}simba_job"),
            rw: format!("{prefix}simba_rw"),
            rw_holder: format!("{prefix}simba_rw_holder"),
            rw_waiter: format!("{prefix}simba_rw_waiter"),
        }
    }

    /// The schema script with the prefix applied to every table and index name.
    pub(crate) fn script(&self, script: &str) -> Vec<String> {
        let p = &self.prefix;
        script
            .lines()
            .filter(|l| !l.trim_start().starts_with("--"))
            .collect::<Vec<_>>()
            .join("\n")
            .split(';')
            .map(|s| {
                s.replace("simba_", &format!("{p}simba_"))
                    .replace("idx_", &format!("{p}idx_"))
                    .trim()
                    .to_owned()
            })
            .filter(|s| !s.is_empty())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_gets_the_prefix() {
        let t = Tables::new("t1_");
        let stmts = t.script(include_str!("../../../sql/init-simba-mysql.sql"));
        assert_eq!(stmts.len(), 8);
        assert!(stmts[0].contains("t1_simba_session"));
        assert!(stmts[0].contains("t1_idx_session_expires"));
        assert!(stmts[3].contains("t1_simba_queue") && stmts[3].contains("t1_idx_queue_seq"));
        assert!(stmts[4].contains("t1_simba_job"));
        assert!(stmts[5].contains("t1_simba_rw\n"));
        assert!(
            stmts[6].contains("t1_simba_rw_holder")
                && stmts[6].contains("t1_idx_rw_holder_session")
        );
        assert!(
            stmts[7].contains("t1_simba_rw_waiter") && stmts[7].contains("t1_idx_rw_waiter_seq")
        );
        let pg = t.script(include_str!("../../../sql/init-simba-postgresql.sql"));
        assert_eq!(pg.len(), 15);
        assert!(pg[1].contains("t1_idx_session_expires on t1_simba_session"));
        assert!(pg[7].contains("t1_idx_queue_seq on t1_simba_queue"));
        assert!(pg[8].contains("t1_simba_job"));
        assert!(pg[9].contains("t1_simba_rw\n"));
        assert!(pg[11].contains("t1_idx_rw_holder_session on t1_simba_rw_holder"));
        assert!(pg[13].contains("t1_idx_rw_waiter_seq on t1_simba_rw_waiter"));
        assert!(pg[14].contains("t1_idx_rw_waiter_session on t1_simba_rw_waiter"));
    }
}
