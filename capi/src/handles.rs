//! Handles: never-reused keys into one table of live objects, each with its kind, so a
//! freed, foreign or wrong-kind handle is refused instead of dereferenced.

use crate::status::{Fail, R};
use crate::types::simba_status::*;
use std::any::Any;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};

type Object = Arc<dyn Any + Send + Sync>;

struct Entry {
    pub(crate) kind: &'static str,
    object: Object,
}

static HANDLES: LazyLock<Mutex<HashMap<usize, Entry>>> = LazyLock::new(Default::default);
/// The next key. Keys start high and step by 16 so they look like (aligned) pointers; they
/// never wrap (so never NULL, never reused): once the next step would overflow, no handle is
/// made any more (`SIMBA_ERROR`; 2^28 handles on a 32-bit target, 2^60 on a 64-bit one).
static NEXT_KEY: AtomicUsize = AtomicUsize::new(0x1000);

pub(crate) fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Object kinds behind handles, with the C type name used in messages.
pub(crate) trait Kind: Any + Send + Sync + Sized {
    const NAME: &'static str;
}

pub(crate) fn register<T: Kind, H>(object: T) -> R<*mut H> {
    let key = NEXT_KEY
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |k| k.checked_add(16))
        .map_err(|_| {
            Fail::new(
                SIMBA_ERROR,
                format!(
                    "no {} handle made: this process used up the handle keys",
                    T::NAME
                ),
            )
        })?;
    let entry = Entry {
        kind: T::NAME,
        object: Arc::new(object),
    };
    locked(&HANDLES).insert(key, entry);
    Ok(key as *mut H)
}

pub(crate) fn lookup<T: Kind, H>(handle: *const H, remove: bool) -> R<Arc<T>> {
    if handle.is_null() {
        return Err(Fail::new(
            SIMBA_NULL_ARGUMENT,
            format!("the {} handle is NULL", T::NAME),
        ));
    }
    let key = handle as usize;
    let mut table = locked(&HANDLES);
    let Some(entry) = table.get(&key) else {
        return Err(Fail::new(
            SIMBA_INVALID_HANDLE,
            format!(
                "{handle:p} is not a live handle (already freed, or never returned by this \
                 library); expected a {}",
                T::NAME
            ),
        ));
    };
    let object = entry.object.clone().downcast::<T>().map_err(|_| {
        Fail::new(
            SIMBA_INVALID_HANDLE,
            format!("{handle:p} is a {}, not a {}", entry.kind, T::NAME),
        )
    })?;
    if remove {
        table.remove(&key);
    }
    Ok(object)
}

/// The live object behind a handle.
pub(crate) fn get<T: Kind, H>(handle: *const H) -> R<Arc<T>> {
    lookup(handle, false)
}

/// Takes a handle out of the table (its `*_free`); the object drops once no call uses it.
pub(crate) fn free<T: Kind, H>(handle: *mut H) -> R {
    let object = lookup::<T, H>(handle, true)?;
    drop(object);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Dummy;
    impl Kind for Dummy {
        const NAME: &'static str = "dummy";
    }

    #[test]
    fn handle_keys_never_wrap() {
        // No other test of this binary makes handles, so moving the counter is safe here.
        let saved = NEXT_KEY.swap(usize::MAX - 31, Ordering::Relaxed);
        let last = register::<Dummy, u8>(Dummy).ok().unwrap();
        assert_eq!(last as usize, usize::MAX - 31);
        // The next key, usize::MAX - 15, is not given out: the step after it would wrap.
        let fail = register::<Dummy, u8>(Dummy).err().unwrap();
        assert_eq!(fail.status, SIMBA_ERROR);
        assert!(
            fail.message.contains("used up the handle keys"),
            "{}",
            fail.message
        );
        assert_eq!(
            NEXT_KEY.load(Ordering::Relaxed),
            usize::MAX - 15,
            "not wrapped"
        );
        NEXT_KEY.store(saved, Ordering::Relaxed);
        assert!(free::<Dummy, u8>(last).is_ok());
    }
}
