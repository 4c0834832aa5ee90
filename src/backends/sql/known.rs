//! What the backend keeps of each session's holdings between keep-alives: the version the
//! last listing answered, its leases and read-write terms (a keep-alive answered "same
//! version" reuses them), and the sample of two entries each keep-alive checks.

use super::driver::{Holding, LEASE, SAMPLE};
use crate::spi::{HeldRw, RwMode};
use crate::types::{LeaseName, Token};
use std::time::{Duration, Instant};

/// The leases and read-write terms of a session at one version of its holdings.
#[derive(Debug)]
pub(super) struct KnownLeases {
    pub(super) version: i64,
    pub(super) leases: Vec<(LeaseName, Token)>,
    pub(super) rw: Vec<HeldRw>,
    /// Whether the keep-alive that listed them read the read-write terms (see
    /// [`Known::rw`]).
    pub(super) rw_listed: bool,
    /// Where the next sample starts, in the leases followed by the read-write terms.
    pub(super) next: usize,
    /// The last keep-alive that used this list, and its lease: an entry unused for longer is
    /// of a session that expired (or was abandoned) and is dropped.
    pub(super) used: Instant,
    pub(super) lease: Duration,
}

impl KnownLeases {
    /// The version, the next [`SAMPLE`] entries to check (leases and read-write terms, in
    /// turn) and whether the list holds the read-write terms.
    pub(super) fn sample(&mut self) -> (i64, Vec<Holding>, bool) {
        let n = self.leases.len() + self.rw.len();
        let take = SAMPLE.min(n);
        let wire = |t: Token| i64::try_from(t.get()).unwrap_or(i64::MAX);
        let sample = (0..take)
            .map(|i| {
                let at = (self.next + i) % n;
                match self.leases.get(at) {
                    Some((name, t)) => (name.as_str().to_owned(), wire(*t), LEASE),
                    None => {
                        let r = &self.rw[at - self.leases.len()];
                        let side = i64::from(r.mode == RwMode::Write);
                        (r.name.as_str().to_owned(), wire(r.token), side)
                    }
                }
            })
            .collect();
        if n > 0 {
            self.next = (self.next + take) % n;
        }
        (self.version, sample, self.rw_listed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sample_turns_over_the_leases_then_the_terms() {
        let name = |n: &str| LeaseName::new(n).unwrap();
        let t = |n: u64| Token::new(n).unwrap();
        let mut k = KnownLeases {
            version: 7,
            leases: vec![(name("a"), t(1)), (name("b"), t(2))],
            rw: vec![HeldRw {
                name: name("a"),
                mode: RwMode::Write,
                token: t(3),
            }],
            rw_listed: true,
            next: 0,
            used: Instant::now(),
            lease: Duration::from_secs(1),
        };
        let e = |n: &str, t: i64, side: i64| (n.to_owned(), t, side);
        assert_eq!(
            k.sample(),
            (7, vec![e("a", 1, LEASE), e("b", 2, LEASE)], true)
        );
        assert_eq!(k.sample(), (7, vec![e("a", 3, 1), e("a", 1, LEASE)], true));
        assert_eq!(k.sample(), (7, vec![e("b", 2, LEASE), e("a", 3, 1)], true));
        k.leases.clear();
        k.rw[0].mode = RwMode::Read;
        k.next = 0;
        assert_eq!(k.sample(), (7, vec![e("a", 3, 0)], true));
        k.rw.clear();
        k.rw_listed = false;
        assert_eq!(k.sample(), (7, vec![], false));
    }
}
