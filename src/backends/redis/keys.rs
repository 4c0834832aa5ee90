//! The key schema (see the module documentation's table): key names under a prefix, the
//! notification a pub/sub channel carries, and the Redis Cluster hash slot of a key.

use crate::spi::Notification;
use crate::types::{GroupName, LeaseName, SessionId};

/// The Redis Cluster hash slot of `key` (CRC16/XMODEM of its hash tag, mod 16384).
///
/// ```
/// use simba_lease::backends::redis::key_slot;
/// assert_eq!(key_slot("foo"), 12182);
/// assert_eq!(key_slot("simba:lease:{foo}"), key_slot("other:{foo}:x"));
/// ```
pub fn key_slot(key: &str) -> u16 {
    let b = key.as_bytes();
    let tag = match b.iter().position(|&c| c == b'{') {
        Some(open) => match b[open + 1..].iter().position(|&c| c == b'}') {
            Some(len) if len > 0 => &b[open + 1..open + 1 + len],
            _ => b,
        },
        None => b,
    };
    let mut crc: u16 = 0;
    for &byte in tag {
        crc ^= (byte as u16) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

/// Key names under a prefix.
#[derive(Clone, Debug)]
pub(super) struct Keys {
    pub(super) prefix: String,
}

impl Keys {
    pub(super) fn lease_prefix(&self) -> String {
        format!("{}:lease:", self.prefix)
    }
    pub(super) fn group_prefix(&self) -> String {
        format!("{}:group:", self.prefix)
    }
    pub(super) fn session_prefix(&self) -> String {
        format!("{}:session:", self.prefix)
    }
    pub(super) fn lease(&self, name: &str) -> String {
        format!("{}:lease:{{{name}}}", self.prefix)
    }
    pub(super) fn group(&self, name: &str) -> String {
        format!("{}:group:{{{name}}}", self.prefix)
    }
    /// A lease's fair-lock queue (same slot as the lease).
    pub(super) fn queue(&self, name: &str) -> String {
        format!("{}:queue:{{{name}}}", self.prefix)
    }
    /// The read-write lock of a name (same slot as the lease of that name).
    pub(super) fn rw(&self, name: &str) -> String {
        format!("{}:rw:{{{name}}}", self.prefix)
    }
    pub(super) fn rw_prefix(&self) -> String {
        format!("{}:rw:", self.prefix)
    }
    /// One node: the read-write lock keys a session holds or waits for (same slot as the
    /// session), for its close.
    pub(super) fn rw_index(&self, sid: &SessionId) -> String {
        format!("{}:rw", self.session(sid))
    }
    /// The deadlines of the places in a lease's queue (same slot as the lease).
    pub(super) fn queue_deadlines(&self, name: &str) -> String {
        format!("{}:deadlines", self.queue(name))
    }
    pub(super) fn session(&self, sid: &SessionId) -> String {
        format!("{}:session:{{{sid}}}", self.prefix)
    }
    pub(super) fn leases_index(&self, sid: &SessionId) -> String {
        format!("{}:leases", self.session(sid))
    }
    pub(super) fn groups_index(&self, sid: &SessionId) -> String {
        format!("{}:groups", self.session(sid))
    }
    /// The session's lock-delay record (same slot): expires the delay after the session.
    pub(super) fn session_delay(&self, sid: &SessionId) -> String {
        format!("{}:delay", self.session(sid))
    }
    /// The session's hash, its two index sets and its lock-delay record (one slot), the keys
    /// of a keep-alive or a close.
    pub(super) fn session_keys(&self, sid: &SessionId) -> [String; 4] {
        [
            self.session(sid),
            self.leases_index(sid),
            self.groups_index(sid),
            self.session_delay(sid),
        ]
    }
    /// Cluster: the session's anchor on the node serving the slot of hash tag `tag`.
    pub(super) fn anchor(&self, tag: &str, sid: &SessionId) -> String {
        format!("{}:anchor:{{{tag}}}:{sid}", self.prefix)
    }

    /// The notification a message `payload` on `channel` means, if any.
    /// A lease channel carries `acquired` (a new term) or `released`; a read-write lock's
    /// channel `released` (a term ended or a waiting writer left: a release of the name, as
    /// the memory backend tells it); a group channel `joined` or `left`.
    pub(super) fn notification(&self, channel: &str, payload: &[u8]) -> Option<Notification> {
        let inner = |p: String| {
            channel
                .strip_prefix(&p)?
                .strip_prefix('{')?
                .strip_suffix('}')
                .map(str::to_owned)
        };
        if let Some(n) = inner(self.lease_prefix()) {
            let name = LeaseName::new(n).ok()?;
            return Some(match payload {
                b"acquired" => Notification::Acquired(name),
                _ => Notification::Released(name),
            });
        }
        if let Some(n) = inner(self.rw_prefix()) {
            return LeaseName::new(n).ok().map(Notification::Released);
        }
        inner(self.group_prefix())
            .and_then(|g| GroupName::new(g).ok())
            .map(Notification::GroupChanged)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_follow_hash_tags() {
        // Values from `CLUSTER KEYSLOT` on Redis 7.
        assert_eq!(key_slot("foo"), 12182);
        assert_eq!(key_slot("bar"), 5061);
        assert_eq!(key_slot("{user1000}.following"), key_slot("user1000"));
        assert_eq!(key_slot("foo{}{bar}"), 8363); // an empty tag hashes the whole key
        let k = Keys {
            prefix: "simba".into(),
        };
        let sid = SessionId::random();
        assert_eq!(key_slot(&k.session(&sid)), key_slot(&k.leases_index(&sid)));
        assert_eq!(key_slot(&k.session(&sid)), key_slot(&k.groups_index(&sid)));
        assert_eq!(key_slot(&k.session(&sid)), key_slot(&k.session_delay(&sid)));
        let anchor = k.anchor("a1", &sid);
        assert_eq!(key_slot(&anchor), key_slot(&format!("{anchor}:delay:1.2")));
        assert_eq!(key_slot(&k.lease("job")), key_slot("job"));
        assert_eq!(key_slot(&k.rw("job")), key_slot("job"));
        assert_eq!(key_slot(&k.session(&sid)), key_slot(&k.rw_index(&sid)));
    }

    #[test]
    fn channels_map_to_notifications() {
        let k = Keys {
            prefix: "app".into(),
        };
        let job = LeaseName::new("job").unwrap();
        assert_eq!(
            k.notification("app:lease:{job}", b"released"),
            Some(Notification::Released(job.clone()))
        );
        assert_eq!(
            k.notification("app:lease:{job}", b"acquired"),
            Some(Notification::Acquired(job))
        );
        for payload in [&b"joined"[..], b"left"] {
            assert_eq!(
                k.notification("app:group:{workers}", payload),
                Some(Notification::GroupChanged(
                    GroupName::new("workers").unwrap()
                ))
            );
        }
        assert_eq!(
            k.notification("app:rw:{job}", b"released"),
            Some(Notification::Released(LeaseName::new("job").unwrap()))
        );
        assert_eq!(k.notification("other:lease:{job}", b"released"), None);
        assert_eq!(k.notification("app:lease:job", b"released"), None);
    }
}
