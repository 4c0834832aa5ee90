//! The TCK on the simulation's model backend: the model the simulation checks the engine
//! against keeps the contract every backend keeps.

use simba_lease::sim::ModelBackend;
use std::sync::Arc;

simba_lease::tck_suite!(|| Arc::new(ModelBackend::new()));
