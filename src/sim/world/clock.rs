//! The clients' clocks: each runs at its own rate (parts per million of true time, within
//! or beyond the drift bound), so a local instant maps to true (backend) time and back.

use super::{World, PPM};
use std::time::{Duration, Instant};

impl World<'_> {
    pub(super) fn local_ns(&self, c: usize, t: u64) -> u64 {
        (self.clients[c].rate as u128 * t as u128 / PPM as u128) as u64
    }

    pub(super) fn local(&self, c: usize, t: u64) -> Instant {
        self.base + Duration::from_nanos(self.local_ns(c, t))
    }

    /// The first true time at which client `c`'s clock reads `at` or later.
    pub(super) fn true_of(&self, c: usize, at: Instant) -> u64 {
        let l = at.saturating_duration_since(self.base).as_nanos();
        let r = self.clients[c].rate as u128;
        (l * PPM as u128).div_ceil(r) as u64
    }
}
