//! Run-once jobs on ZooKeeper: `{root}/jobs/{name}`, a persistent node that is never deleted,
//! holds the last claim as text, `1 {token} run {session} {at_most ms}` while the job runs
//! or `1 {token} done {session} {until}` once it finished; the token is a counter in the data,
//! so it never resets while the node lives. A running claim also has an ephemeral child
//! `{root}/jobs/{name}/run` of its session's client, made in the same multi as the claim's
//! write: the claim ends with its session when ZooKeeper removes that node.
//!
//! ZooKeeper gives clients no clock, so "now" is the `mtime` of a write of this request's
//! own, to `{root}/clock`, made after the record was read (so it can only be later than the
//! read). A running claim ends at its write's `mtime` + `at_most`; a finished one at its
//! `until`, the claim's `mtime` + `at_least`. `mtime` is the wall clock of the server that
//! led the write: after a leader change between servers whose clocks disagree, claims end
//! early or late by the skew, and a step of the leader's clock moves them at once (as it
//! would a database's). Writes commit through a quorum, so tokens survive a leader change.
//!
//! Round trips: a claim is a read and, when it takes the job, a multi; a running record adds
//! the `exists` of its marker, and a record that is not new or dead adds the clock write
//! (2 to 4 in all). A finish is a read, a clock write and a multi.

use super::facade::{backend as zk_err, call};
use super::session::{Sessions, ZkSession};
use crate::backends::jobs::{check_at_least, check_at_most, ms};
use crate::error::{Error, Result};
use crate::spi::JobClaim;
use crate::types::{LeaseName, SessionId, Token};
use std::time::Duration;
use zookeeper_client as zk;

/// A job node's record.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Record {
    token: u64,
    running: bool,
    session: String,
    /// `at_most` (ms) while running; `until` (server ms) once done.
    ms: i64,
}

impl Record {
    fn encode(&self) -> Vec<u8> {
        let phase = if self.running { "run" } else { "done" };
        format!("1 {} {phase} {} {}", self.token, self.session, self.ms).into_bytes()
    }

    fn decode(data: &[u8]) -> Option<Record> {
        let text = std::str::from_utf8(data).ok()?;
        let mut it = text.split(' ');
        if it.next()? != "1" {
            return None;
        }
        let token = it.next()?.parse().ok()?;
        let running = match it.next()? {
            "run" => true,
            "done" => false,
            _ => return None,
        };
        let session = it.next()?.to_owned();
        let ms = it.next()?.parse().ok()?;
        it.next().is_none().then_some(Record {
            token,
            running,
            session,
            ms,
        })
    }
}

fn bad_record(op: &'static str, path: &str) -> Error {
    super::failure::error(
        op,
        format!("the job node {path} holds no job record (written outside simba-lease?)"),
    )
}

/// Sends the multi now; its future answers with the error of the operation that failed.
fn commit<'a>(
    mut w: zk::MultiWriter<'a>,
) -> impl std::future::Future<Output = std::result::Result<(), zk::Error>> + 'a {
    let sent = w.commit();
    async move { sent.await.map(drop).map_err(zk::Error::from) }
}

impl Sessions {
    fn job_path(&self, name: &LeaseName) -> String {
        format!("{}/jobs/{}", self.cfg.root, name.as_str())
    }

    /// The server's clock now: the `mtime` of a write to `{root}/clock`.
    fn server_now(&self, s: &ZkSession, client: &zk::Client, op: &'static str) -> Result<i64> {
        let path = format!("{}/clock", self.cfg.root);
        let limit = s.limit(&self.cfg);
        for _ in 0..2 {
            match call(op, limit, client.set_data(&path, &[], None))? {
                Ok(stat) => return Ok(stat.mtime),
                Err(zk::Error::NoNode) => self.cfg.mkdirs(client, &path, limit)?,
                Err(e) => return Err(self.fail(s, op, e)),
            }
        }
        Err(super::failure::error(
            op,
            format!("{path} could not be written"),
        ))
    }

    pub(super) fn claim_job(
        &self,
        session: &SessionId,
        name: &LeaseName,
        at_most: Duration,
    ) -> Result<JobClaim> {
        const OP: &str = "claiming a job";
        check_at_most(at_most)?;
        let at_most_ms = i64::try_from(ms(at_most)).unwrap_or(i64::MAX);
        let s = self.live(session)?;
        let limit = s.limit(&self.cfg);
        let path = self.job_path(name);
        let marker = format!("{path}/run");
        let acl = self.cfg.acl.for_path(&path);
        let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::new(&acl));
        let macl = self.cfg.acl.for_path(&marker);
        let ephemeral = zk::CreateMode::Ephemeral.with_acls(zk::Acls::new(&macl));
        for _ in 0..8 {
            s.check_connected(OP)?;
            let client = s.client()?;
            let read = match call(OP, limit, client.get_data(&path))? {
                Ok(r) => Some(r),
                Err(zk::Error::NoNode) => None,
                Err(e) => return Err(self.fail(&s, OP, e)),
            };
            let mut claim = Record {
                token: 1,
                running: true,
                session: session.to_string(),
                ms: at_most_ms,
            };
            let mut w = client.new_multi_writer();
            match read {
                None => {
                    w.add_create(&path, &claim.encode(), &persistent)
                        .map_err(|e| zk_err(OP, e))?;
                }
                Some((data, stat)) => {
                    let rec = Record::decode(&data).ok_or_else(|| bad_record(OP, &path))?;
                    // A running claim is live while its marker is (its session lives).
                    let marked = rec.running
                        && match call(OP, limit, client.check_stat(&marker))? {
                            Ok(m) => m.is_some(),
                            Err(e) => return Err(self.fail(&s, OP, e)),
                        };
                    if marked || !rec.running {
                        let until = if rec.running {
                            stat.mtime.saturating_add(rec.ms)
                        } else {
                            rec.ms
                        };
                        let now = self.server_now(&s, &client, OP)?;
                        if now < until {
                            let left = u64::try_from(until - now).unwrap_or(0);
                            return Ok(JobClaim::Busy {
                                remaining: Duration::from_millis(left),
                            });
                        }
                    }
                    claim.token = rec.token.saturating_add(1);
                    w.add_set_data(&path, &claim.encode(), Some(stat.version))
                        .map_err(|e| zk_err(OP, e))?;
                    if marked {
                        w.add_delete(&marker, None).map_err(|e| zk_err(OP, e))?;
                    }
                }
            }
            w.add_create(&marker, claim.token.to_string().as_bytes(), &ephemeral)
                .map_err(|e| zk_err(OP, e))?;
            match call(OP, limit, commit(w))? {
                Ok(()) => {
                    return Ok(JobClaim::Claimed {
                        token: Token::new(claim.token)?,
                        remaining: at_most,
                    })
                }
                // Changed meanwhile (another claim, a finish, a marker gone): read again.
                Err(zk::Error::BadVersion | zk::Error::NodeExists) => {}
                Err(zk::Error::NoNode) => {
                    let jobs = format!("{}/jobs", self.cfg.root);
                    self.cfg.mkdirs(&client, &jobs, limit)?;
                }
                Err(e) => return Err(self.fail(&s, OP, e)),
            }
        }
        Err(super::failure::error(
            OP,
            format!("job {name} kept changing hands"),
        ))
    }

    pub(super) fn finish_job(
        &self,
        session: &SessionId,
        name: &LeaseName,
        token: Token,
        at_least: Duration,
    ) -> Result<bool> {
        const OP: &str = "finishing a job";
        check_at_least(at_least)?;
        let at_least_ms = i64::try_from(ms(at_least)).unwrap_or(i64::MAX);
        let Some(s) = self.live_or_none(session) else {
            return Ok(false);
        };
        let Ok(client) = s.client() else {
            return Ok(false);
        };
        let limit = s.limit(&self.cfg);
        let path = self.job_path(name);
        let (data, stat) = match call(OP, limit, client.get_data(&path))? {
            Ok(r) => r,
            Err(zk::Error::NoNode) => return Ok(false),
            Err(e) => return self.fail_unchanged(&s, OP, e),
        };
        let rec = Record::decode(&data).ok_or_else(|| bad_record(OP, &path))?;
        if !rec.running || rec.token != token.get() || rec.session != session.as_str() {
            return Ok(false);
        }
        // The record's last write was the claim: its mtime is when the claim began.
        let started = stat.mtime;
        let now = match self.server_now(&s, &client, OP) {
            Ok(now) => now,
            Err(Error::SessionExpired { .. }) => return Ok(false),
            Err(e) => return Err(e),
        };
        if now >= started.saturating_add(rec.ms) {
            return Ok(false); // ran out (at_most)
        }
        let done = Record {
            running: false,
            ms: started.saturating_add(at_least_ms),
            ..rec
        };
        let mut w = client.new_multi_writer();
        w.add_set_data(&path, &done.encode(), Some(stat.version))
            .map_err(|e| zk_err(OP, e))?;
        // Fails once the session ended (its marker is gone with it).
        w.add_delete(&format!("{path}/run"), None)
            .map_err(|e| zk_err(OP, e))?;
        match call(OP, limit, commit(w))? {
            Ok(()) => Ok(true),
            Err(zk::Error::BadVersion | zk::Error::NoNode) => Ok(false),
            Err(e) => self.fail_unchanged(&s, OP, e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_reject_foreign_data() {
        let r = Record {
            token: 7,
            running: true,
            session: "0123456789abcdef".into(),
            ms: 1500,
        };
        assert_eq!(Record::decode(&r.encode()), Some(r.clone()));
        let d = Record {
            running: false,
            ..r
        };
        assert_eq!(Record::decode(&d.encode()), Some(d));
        for bad in [
            &b""[..],
            b"1 7 run x",
            b"2 7 run x 5",
            b"1 x run s 5",
            b"1 7 run s 5 6",
        ] {
            assert_eq!(
                Record::decode(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
