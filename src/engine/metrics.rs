//! The engine's figures, published through the `metrics` facade (see [`crate::metrics`]).

#[cfg(feature = "metrics")]
mod enabled {
    use crate::engine::{Event, LossReason};
    use std::time::Duration;

    fn reason(r: LossReason) -> &'static str {
        match r {
            LossReason::SessionExpired => "session_expired",
            LossReason::Expired => "expired",
            LossReason::Missing => "missing",
            LossReason::Resigned => "resigned",
            LossReason::Closed => "closed",
        }
    }

    pub(crate) fn keep_alive(
        backend: &'static str,
        rtt: Duration,
        left: Duration,
        slack: Duration,
    ) {
        metrics::histogram!("simba_keep_alive_seconds", "backend" => backend).record(rtt);
        metrics::histogram!("simba_keep_alive_time_left_seconds", "backend" => backend)
            .record(left);
        metrics::histogram!("simba_keep_alive_slack_seconds", "backend" => backend).record(slack);
    }

    pub(crate) fn keep_alive_failed(backend: &'static str) {
        metrics::counter!("simba_keep_alive_failures_total", "backend" => backend).increment(1);
    }

    pub(crate) fn event(e: &Event) {
        let session = |event: &'static str| {
            metrics::counter!("simba_session_events_total", "event" => event).increment(1);
        };
        match e {
            Event::Jeopardy { .. } => session("jeopardy"),
            Event::Recovered { .. } => session("recovered"),
            Event::SessionExpired { .. } => session("expired"),
            Event::SessionReopened { .. } => session("reopened"),
            Event::Closed { .. } => session("closed"),
            Event::Elected { term } => {
                metrics::gauge!("simba_leader", "name" => term.name.to_string()).set(1.0);
            }
            Event::Revoked { term, reason: r } => {
                metrics::gauge!("simba_leader", "name" => term.name.to_string()).set(0.0);
                if !matches!(r, LossReason::Resigned | LossReason::Closed) {
                    metrics::counter!("simba_terms_lost_total", "kind" => "election", "reason" => reason(*r))
                        .increment(1);
                }
            }
            Event::LockLost { reason: r, .. }
                if !matches!(r, LossReason::Resigned | LossReason::Closed) =>
            {
                metrics::counter!("simba_terms_lost_total", "kind" => "lock", "reason" => reason(*r))
                    .increment(1);
            }
            _ => {}
        }
    }

    pub(crate) fn lock_wait(waited: Duration) {
        metrics::histogram!("simba_lock_wait_seconds").record(waited);
    }

    pub(crate) fn lock_hold(held: Duration) {
        metrics::histogram!("simba_lock_hold_seconds").record(held);
    }
}

#[cfg(feature = "metrics")]
pub(crate) use enabled::*;

#[cfg(not(feature = "metrics"))]
mod disabled {
    use crate::engine::Event;
    use std::time::Duration;

    pub(crate) fn keep_alive(_: &'static str, _: Duration, _: Duration, _: Duration) {}
    pub(crate) fn keep_alive_failed(_: &'static str) {}
    pub(crate) fn event(_: &Event) {}
    pub(crate) fn lock_wait(_: Duration) {}
    pub(crate) fn lock_hold(_: Duration) {}
}

#[cfg(not(feature = "metrics"))]
pub(crate) use disabled::*;
