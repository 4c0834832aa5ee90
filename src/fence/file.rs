//! The file fence: one immutable version file per token in a directory per key, written to
//! a temporary file and renamed into place; the highest version is the value. No lock file,
//! so no lock is ever left behind by a crashed or paused writer.

use super::{check, check_key, Fenced};
use crate::error::{Error, Result};
use crate::types::Token;
use std::ffi::OsStr;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// How many times [`FileFence::get`] reads again when the newest version was replaced by a
/// newer one between listing and reading.
const READ_ATTEMPTS: usize = 100;

/// A fence on a local or shared directory: for a job that writes its results to a volume.
///
/// Each fenced key is a directory `<dir>/<key>/` holding one file per token,
/// `<dir>/<key>/<token>` (20 digits, zero-padded, so names sort as tokens do). The highest
/// version **is** the newest recorded token and its file is the value: readers take the
/// highest ([`get`](Self::get)). A write ([`put`](Self::put)):
///
/// 1. lists the directory and refuses a token below the highest version
///    ([`Error::StaleToken`]);
/// 2. writes the value to a temporary file (`.<token>.<random>.tmp`), `fsync`s it, renames
///    it to its version's name (atomic: readers see the whole version or none; an equal
///    token replaces its own version) and `fsync`s the directory;
/// 3. lists again: if a higher version appeared meanwhile, removes its own and refuses
///    ([`Error::StaleToken`]); else removes the lower versions and returns `Ok`.
///
/// What this guarantees on a local file system (ext4, xfs, btrfs, tmpfs, APFS): the highest
/// version never goes down (only versions below a higher one are ever removed), so a reader
/// never reads an older term's value after a newer one; a write is refused once a higher
/// version was in place before it listed; and the accepted writes (`Ok`), in the order they
/// were renamed into place, have non-decreasing tokens (if a lower one was renamed after a
/// higher one, its second listing saw the higher). What it does not: a write refused in
/// step 3 was the highest version for the moment between its rename and the newer term's,
/// and a reader may have read it then (never after); writers and readers must all use this
/// layout (a plain write to `<dir>/<key>/…` bypasses the fence); and a crash can leave a
/// temporary file or a refused version behind, which the next accepted higher write removes.
///
/// On NFS (v3 and later): a rename within one directory is atomic on the server, and a
/// version is complete for every client that opens it after its rename (close-to-open
/// consistency: it is `fsync`ed first). But clients cache directory listings (for up to
/// `acdirmax`, 60 s by default): a writer may not see a version another client made, and be
/// told its stale write was applied; readers still never take a lower version over a higher
/// one they see. Mount with `actimeo=0` (or `noac`, `lookupcache=none`) for listings that
/// ask the server each time; the guarantees above then hold across clients. SMB and other
/// network file systems: as NFS at best, check their rename and caching semantics.
///
/// ```
/// use simba_lease::fence::FileFence;
/// use simba_lease::{Config, Error, Session};
///
/// let dir = std::env::temp_dir().join(format!("simba-file-fence-{}", std::process::id()));
/// let fence = FileFence::new(&dir);
/// let a = Session::connect("memory://file-fence", Config::default())?;
/// let b = Session::connect("memory://file-fence", Config::default())?;
///
/// let old = a.lock("report")?;
/// let stale = old.token();
/// fence.put("report", stale, b"first")?;
/// drop(old); // its term ends (in real life: it expired while its holder was paused)
///
/// let new = b.lock("report")?; // a later term: a greater token
/// fence.put("report", new.token(), b"second")?;
/// let late = fence.put("report", stale, b"late write of the old holder");
/// assert!(matches!(late, Err(Error::StaleToken { .. })));
/// assert_eq!(fence.get("report")?.unwrap().value, b"second");
/// std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct FileFence {
    dir: PathBuf,
}

impl FileFence {
    /// A fence whose keys are directories in `dir` (created by the first write).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        FileFence { dir: dir.into() }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Writes `value` as the version of `token` under `key` if `token` is not below the
    /// newest version; [`Error::StaleToken`] otherwise (see the type's documentation for
    /// what a refused write may have shown).
    pub fn put(&self, key: &str, token: Token, value: &[u8]) -> Result<()> {
        check_key(key)?;
        let dir = self.dir.join(key);
        fs::create_dir_all(&dir).map_err(|e| io_error("creating the fence directory", &dir, e))?;
        check(key, newest(&dir)?, token)?;
        let name = version_name(token);
        let tmp = dir.join(format!(".{name}.{:016x}.tmp", crate::rand::u64()));
        if let Err(e) = write_synced(&tmp, value) {
            let _ = fs::remove_file(&tmp);
            return Err(io_error("writing a fenced file", &tmp, e));
        }
        let path = dir.join(&name);
        if let Err(e) = fs::rename(&tmp, &path) {
            let _ = fs::remove_file(&tmp);
            // A newer writer removes the temporary files of lower tokens.
            check(key, newest(&dir)?, token)?;
            return Err(io_error("renaming a fenced file into place", &path, e));
        }
        sync_dir(&dir)?;
        if let Err(stale) = check(key, newest(&dir)?, token) {
            let _ = fs::remove_file(&path);
            return Err(stale);
        }
        prune(&dir, token);
        Ok(())
    }

    /// The newest version of `key`: its token and value; `None` when nothing was written.
    pub fn get(&self, key: &str) -> Result<Option<Fenced>> {
        check_key(key)?;
        let dir = self.dir.join(key);
        for _ in 0..READ_ATTEMPTS {
            let Some(token) = newest(&dir)? else {
                return Ok(None);
            };
            let path = dir.join(version_name(token));
            match fs::read(&path) {
                Ok(value) => return Ok(Some(Fenced { token, value })),
                // Removed after a newer version landed: list again.
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io_error("reading a fenced file", &path, e)),
            }
        }
        Err(Error::Backend {
            operation: "reading a fenced file",
            source: format!(
                "the newest version in {} changed {READ_ATTEMPTS} times while it was read",
                dir.display()
            )
            .into(),
        })
    }

    /// The newest token recorded for `key` (its highest version); `None` when nothing was
    /// written.
    pub fn newest(&self, key: &str) -> Result<Option<Token>> {
        check_key(key)?;
        newest(&self.dir.join(key))
    }
}

/// The file name of a version.
fn version_name(token: Token) -> String {
    format!("{:020}", token.get())
}

/// The token of a version's file name (20 digits), or of a temporary file's
/// (`.<20 digits>.<random>.tmp`).
fn token_of(name: &OsStr) -> Option<(Token, bool)> {
    let name = name.to_str()?;
    let (digits, temporary) = match name.strip_prefix('.') {
        Some(rest) => (rest.split('.').next()?, rest.ends_with(".tmp")),
        None => (name, false),
    };
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let token = Token::new(digits.parse().ok()?).ok()?;
    Some((token, temporary))
}

/// The highest version in `dir`; `None` when there is none (or no directory).
fn newest(dir: &Path) -> Result<Option<Token>> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_error("listing a fence directory", dir, e)),
    };
    let mut newest = None;
    for entry in entries {
        let entry = entry.map_err(|e| io_error("listing a fence directory", dir, e))?;
        if let Some((token, false)) = token_of(&entry.file_name()) {
            newest = newest.max(Some(token));
        }
    }
    Ok(newest)
}

/// Removes the versions and temporary files of tokens below `token` (best effort: a
/// failure leaves a file that no reader takes and a later write removes).
fn prune(dir: &Path, token: Token) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if token_of(&entry.file_name()).is_some_and(|(t, _)| t < token) {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// Writes a new file and flushes it to the disk.
fn write_synced(path: &Path, value: &[u8]) -> io::Result<()> {
    let mut file = fs::File::create_new(path)?;
    file.write_all(value)?;
    file.sync_all()
}

/// Flushes a directory's entries (the rename) to the disk.
fn sync_dir(dir: &Path) -> Result<()> {
    #[cfg(unix)]
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_error("syncing a fence directory", dir, e))?;
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

/// An I/O failure as [`Error::Backend`], naming the path.
fn io_error(operation: &'static str, path: &Path, e: io::Error) -> Error {
    Error::Backend {
        operation,
        source: Box::new(io::Error::new(e.kind(), format!("{}: {e}", path.display()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;

    fn t(v: u64) -> Token {
        Token::new(v).unwrap()
    }

    struct TempDir(PathBuf);

    impl TempDir {
        fn new() -> Self {
            let dir =
                std::env::temp_dir().join(format!("simba-fence-unit-{:016x}", crate::rand::u64()));
            fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn names_round_trip_and_other_files_are_ignored() {
        assert_eq!(version_name(t(42)), "00000000000000000042");
        assert_eq!(
            token_of(OsStr::new("00000000000000000042")),
            Some((t(42), false))
        );
        assert_eq!(
            token_of(OsStr::new(".00000000000000000042.00ff.tmp")),
            Some((t(42), true))
        );
        for other in [
            "42",
            "00000000000000000000",
            "notes.txt",
            ".x.tmp",
            "99999999999999999999",
        ] {
            assert_eq!(token_of(OsStr::new(other)), None, "{other}");
        }
    }

    #[test]
    fn the_highest_version_wins_and_lower_ones_are_removed() {
        let tmp = TempDir::new();
        let fence = FileFence::new(&tmp.0);
        assert_eq!(fence.get("k").unwrap(), None);
        fence.put("k", t(3), b"three").unwrap();
        fence.put("k", t(3), b"three again").unwrap();
        fence.put("k", t(5), b"five").unwrap();
        match fence.put("k", t(4), b"four") {
            Err(Error::StaleToken { token, newest, .. }) => {
                assert_eq!((token, newest), (t(4), t(5)))
            }
            other => panic!("expected StaleToken, got {other:?}"),
        }
        let got = fence.get("k").unwrap().unwrap();
        assert_eq!((got.token, got.value.as_slice()), (t(5), &b"five"[..]));
        let names: Vec<_> = fs::read_dir(tmp.0.join("k"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [OsString::from(version_name(t(5)))]);
    }

    #[test]
    fn leftovers_are_ignored_by_readers_and_removed_by_a_higher_write() {
        let tmp = TempDir::new();
        let fence = FileFence::new(&tmp.0);
        fence.put("k", t(7), b"seven").unwrap();
        // A leftover temporary file of a crashed writer and a stray lower version (a writer
        // that renamed after the higher one landed and crashed before its second listing).
        fs::write(tmp.0.join("k").join(version_name(t(2))), b"stray").unwrap();
        fs::write(tmp.0.join("k/.00000000000000000009.00.tmp"), b"partial").unwrap();
        assert_eq!(fence.newest("k").unwrap(), Some(t(7)));
        assert_eq!(fence.get("k").unwrap().unwrap().value, b"seven");
        fence.put("k", t(8), b"eight").unwrap();
        assert!(!tmp.0.join("k").join(version_name(t(2))).exists());
        assert!(tmp.0.join("k/.00000000000000000009.00.tmp").exists()); // a higher token's
        assert!(matches!(
            fence.put("../x", t(1), b""),
            Err(Error::InvalidName { .. })
        ));
    }
}
