//! Random bytes and jitter from the operating system's source.

use std::time::Duration;

/// Fills `buf` with random bytes.
pub(crate) fn fill(buf: &mut [u8]) {
    getrandom::fill(buf).expect("the operating system's random source failed");
}

/// A random `u64`.
pub(crate) fn u64() -> u64 {
    let mut b = [0u8; 8];
    fill(&mut b);
    u64::from_le_bytes(b)
}

/// A random duration in `[0, max)`.
pub(crate) fn jitter(max: Duration) -> Duration {
    let nanos = max.as_nanos() as u64;
    if nanos == 0 {
        return Duration::ZERO;
    }
    Duration::from_nanos(u64() % nanos)
}
