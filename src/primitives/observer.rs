//! Watching who holds a lease, without being a candidate.

use super::IntoLeaseName;
use crate::engine::handle::{EngineHandle, HandleId, Watch};
use crate::engine::Session;
use crate::error::Result;
use crate::types::{LeaseName, Owner};
use crate::Event;
use crossbeam_channel::Receiver;

impl Session {
    /// Observes the lease `name`: [`Event::LeaderChanged`] with the holder, its token and
    /// its term's value, first for the current holder, then at every change of holder or
    /// value (read again on every notification of a release, a new term or a new value, and
    /// every `renew_interval / 2`; MySQL only polls).
    ///
    /// ```
    /// use simba_lease::{Config, Event, Session, backends::MemoryBackend};
    /// use std::{sync::Arc, time::Duration};
    /// let session = Session::open(Arc::new(MemoryBackend::new()), Config::default())?;
    /// let observer = session.observe("scheduler")?;
    /// let first = observer.events().recv_timeout(Duration::from_secs(5)).unwrap();
    /// assert!(matches!(first, Event::LeaderChanged { owner: None, .. }));
    /// # Ok::<(), simba_lease::Error>(())
    /// ```
    pub fn observe(&self, name: impl IntoLeaseName) -> Result<Observer> {
        let name = name.into_lease_name()?;
        let inner = &self.inner;
        let (h, events) = inner.watch(Watch::Owner(name.clone()))?;
        Ok(Observer {
            inner: inner.clone(),
            handle: h,
            name,
            events,
        })
    }
}

/// Watches a lease's holder. Dropping it stops the watch.
#[derive(Debug)]
pub struct Observer {
    inner: EngineHandle,
    handle: HandleId,
    name: LeaseName,
    events: Receiver<Event>,
}

impl Observer {
    /// The observed lease.
    pub fn name(&self) -> &LeaseName {
        &self.name
    }

    /// [`Event::LeaderChanged`] events in order.
    pub fn events(&self) -> &Receiver<Event> {
        &self.events
    }

    /// Reads the current holder from the backend.
    pub fn leader(&self) -> Result<Option<Owner>> {
        self.inner.reads().owner(&self.name)
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        let h = self.handle;
        self.inner.unwatch(h);
    }
}
