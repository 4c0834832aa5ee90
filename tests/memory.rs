//! The TCK on the in-memory backend.

use simba_lease::backends::MemoryBackend;
use std::sync::Arc;

simba_lease::tck_suite!(|| Arc::new(MemoryBackend::new()));
