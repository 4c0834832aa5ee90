//! Read-write locks in memory: one record per name (token counter, writer, readers, the
//! waiting writers in arrival order, the terms in their lock-delay), judged on the
//! backend's clock.

use super::*;

impl MemoryBackend {
    pub(super) fn rw_acquire(
        &self,
        session: &SessionId,
        name: &LeaseName,
        mode: RwMode,
        patience: Duration,
    ) -> Result<RwAcquire> {
        if !patience.is_zero() {
            crate::backends::options::check_lease(patience)?;
        }
        let now = self.clock.now();
        let mut guard = self.tables.lock();
        let t = &mut *guard;
        let Some(remaining) = t.live(session, now).map(|s| s.expires - now) else {
            return Err(t.expired(session));
        };
        let row = t.rw.entry(name.clone()).or_default();
        row.prune(&t.sessions, now);
        let held = match mode {
            RwMode::Read => row.readers.get(session).copied(),
            RwMode::Write => row.writer.as_ref().filter(|w| &w.0 == session).map(|w| w.1),
        };
        let token = match (held, mode) {
            (Some(token), _) => token,
            (None, RwMode::Read) => {
                let writer = row.writer.is_some() || row.delayed_writer().is_some();
                if writer || !row.waiting.is_empty() {
                    return Ok(row.busy());
                }
                row.token += 1;
                row.readers.insert(session.clone(), row.token);
                row.token
            }
            (None, RwMode::Write) => {
                let place = row.waiting.iter().position(|(id, _)| id == session);
                let ahead = place.unwrap_or(row.waiting.len());
                let held = row.writer.is_some() || !row.readers.is_empty();
                if held || !row.delayed.is_empty() || ahead > 0 {
                    let until = now + patience;
                    match place {
                        Some(i) => row.waiting[i].1 = until,
                        None if patience.is_zero() => return Ok(row.busy()),
                        None => row.waiting.push((session.clone(), until)),
                    }
                    let busy = row.busy();
                    if let Some(s) = t.sessions.get_mut(session) {
                        s.rw.insert(name.clone());
                    }
                    return Ok(busy);
                }
                row.waiting.retain(|(id, _)| id != session);
                row.token += 1;
                row.writer = Some((session.clone(), row.token));
                row.token
            }
        };
        let token = Token::new(token)?;
        if let Some(s) = t.sessions.get_mut(session) {
            s.rw.insert(name.clone());
        }
        Ok(RwAcquire::Acquired(Term {
            name: name.clone(),
            token,
            remaining,
        }))
    }

    pub(super) fn rw_release(
        &self,
        session: &SessionId,
        name: &LeaseName,
        mode: RwMode,
        token: Token,
    ) -> Result<bool> {
        let now = self.clock.now();
        let mut t = self.tables.lock();
        // An expired session holds nothing, so its release changes nothing.
        if t.live(session, now).is_none() {
            return Ok(false);
        }
        let Some(row) = t.rw.get_mut(name) else {
            return Ok(false);
        };
        let freed = match mode {
            RwMode::Read if row.readers.get(session) == Some(&token.get()) => {
                row.readers.remove(session);
                true
            }
            RwMode::Write if row.writer == Some((session.clone(), token.get())) => {
                row.writer = None;
                true
            }
            _ => false,
        };
        drop(t);
        if freed {
            self.subscribers
                .publish(&Notification::Released(name.clone()));
        }
        Ok(freed)
    }

    pub(super) fn rw_leave_queue(&self, session: &SessionId, name: &LeaseName) -> Result<bool> {
        let mut t = self.tables.lock();
        let Some(row) = t.rw.get_mut(name) else {
            return Ok(false);
        };
        let before = row.waiting.len();
        row.waiting.retain(|(id, _)| id != session);
        let left = row.waiting.len() < before;
        drop(t);
        // Readers (or the next writer) may be waiting for this writer to go: tell them.
        if left {
            self.subscribers
                .publish(&Notification::Released(name.clone()));
        }
        Ok(left)
    }

    pub(super) fn rw_read_state(&self, name: &LeaseName) -> Result<RwState> {
        let now = self.clock.now();
        let t = self.tables.lock();
        let Some(row) = t.rw.get(name) else {
            return Ok(RwState::default());
        };
        let live = |id: &SessionId| t.live(id, now).is_some();
        let token = |id: &SessionId, token: u64| Token::new(token).map(|t| (id.clone(), t));
        Ok(RwState {
            writer: match &row.writer {
                Some((id, tok)) if live(id) => Some(token(id, *tok)?),
                _ => None,
            },
            readers: row
                .readers
                .iter()
                .filter(|(id, _)| live(id))
                .map(|(id, tok)| token(id, *tok))
                .collect::<Result<_>>()?,
            writers_waiting: row
                .waiting
                .iter()
                .filter(|(id, until)| *until > now && live(id))
                .map(|(id, _)| id.clone())
                .collect(),
            last_token: row.token,
            delayed: rw_delays(row, &t.sessions, now)?,
        })
    }
}

/// `row`'s terms in their lock-delay at `now`: those of removed sessions and those whose
/// session expired but is not removed yet, in session order.
fn rw_delays(
    row: &RwRow,
    sessions: &HashMap<SessionId, SessionRow>,
    now: Instant,
) -> Result<Vec<RwDelayed>> {
    let in_delay = |id: &SessionId| {
        let s = sessions.get(id)?;
        let until = s.expires + s.lock_delay;
        (s.expires <= now && until > now).then_some(until)
    };
    let holders = row
        .writer
        .iter()
        .map(|(id, tok)| (id, RwMode::Write, *tok))
        .chain(row.readers.iter().map(|(id, tok)| (id, RwMode::Read, *tok)))
        .filter_map(|(id, mode, tok)| Some((id.clone(), mode, tok, in_delay(id)?)));
    let mut out = row
        .delayed
        .iter()
        .filter(|d| d.3 > now)
        .cloned()
        .chain(holders)
        .map(|(session, mode, token, until)| {
            Ok(RwDelayed {
                session,
                mode,
                token: Token::new(token)?,
                remaining: until - now,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    out.sort_by(|a, b| a.session.cmp(&b.session));
    Ok(out)
}
