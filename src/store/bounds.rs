//! `store.max_file_bytes` and `store.min_free_bytes`: whether the writer
//! may write a batch's puts. The decision ([`verdict`]) is pure; [`Bounds`]
//! feeds it the store file's size and the filesystem's free space, read
//! again only when an estimate comes near a bound, while full, or every
//! `store.sync_interval_ms` (a stat per commit was 5 % of a lazy commit).
//!
//! redb keeps its file at the most pages it used at once and reuses the
//! pages deletes free: near `max_file_bytes` the file's length says little,
//! so there the pages in use are counted instead (a walk of the trees, at
//! most once per `sync_interval_ms`, only near the bound).

use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Why puts are refused: the key whose bound they would pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Limit {
    File,
    Free,
}

impl Limit {
    pub(super) fn reason(self) -> &'static str {
        match self {
            Limit::File => "the store file would pass store.max_file_bytes",
            Limit::Free => "free space below store.min_free_bytes",
        }
    }
}

/// What a batch's puts would do: `file_room` is what may still be
/// written before the file passes `store.max_file_bytes` (`u64::MAX`
/// without that bound), `free_bytes` the filesystem's; 0 disables
/// `min_free_bytes`.
pub(super) fn verdict(
    file_room: u64,
    free_bytes: u64,
    incoming: u64,
    min_free_bytes: u64,
) -> Option<Limit> {
    if incoming > file_room {
        return Some(Limit::File);
    }
    if min_free_bytes > 0 && free_bytes.saturating_sub(incoming) < min_free_bytes {
        return Some(Limit::Free);
    }
    None
}

/// redb writes a put's pages copy-on-write, with a B-tree around them: what
/// a put may take on disk, for the estimate between two readings.
fn cost(put_bytes: u64) -> u64 {
    put_bytes.saturating_mul(2).saturating_add(4096)
}

/// The file's size after redb's next growth: it doubles up to 4 GiB,
/// then grows by up to two 4 GiB regions.
fn next_growth(file_bytes: u64) -> u64 {
    const REGION: u64 = 4 << 30;
    match file_bytes < REGION {
        true => file_bytes.saturating_mul(2),
        false => file_bytes.saturating_add(2 * REGION),
    }
}

/// What may still be written before the file passes `max_file_bytes`.
/// While redb's next growth stays under it: half the largest size its
/// doublings reach under the bound, and at least the file's own size
/// (it grows when its pages are used up, not before). Past that, only what fits
/// in the pages the file already has: half of them, since redb's buddy
/// allocator needs contiguous blocks and frees a commit's old pages only
/// after later commits (measured: the file doubled with 5/8 in use). The
/// file never passes the bound; the data in it may stop at a quarter of it.
pub(super) fn file_room(
    max_file_bytes: u64,
    file_bytes: u64,
    used: impl FnOnce() -> Option<u64>,
) -> u64 {
    if max_file_bytes == 0 {
        return u64::MAX;
    }
    if next_growth(file_bytes) <= max_file_bytes {
        let mut reach = file_bytes.max(1);
        while next_growth(reach) <= max_file_bytes {
            reach = next_growth(reach);
        }
        return (reach / 2).max(file_bytes);
    }
    match used() {
        Some(used) => (file_bytes / 2).saturating_sub(used),
        None => 0,
    }
}

pub(super) struct Bounds {
    file: PathBuf,
    dir: PathBuf,
    max_file_bytes: u64,
    min_free_bytes: u64,
    interval: Duration,
    /// The last reading and what was written since.
    read_at: Option<Instant>,
    file_room: u64,
    free_bytes: u64,
    written: u64,
    /// Refusing puts since the last reading.
    pub(super) full: Option<Limit>,
    /// The pages in use, in bytes, and when they were counted.
    used: Option<(Instant, u64)>,
}

/// Counts the bytes of the pages the database uses.
pub(super) type Used<'a> = &'a dyn Fn() -> Option<u64>;

impl Bounds {
    pub(super) fn new(
        file: PathBuf,
        dir: PathBuf,
        max_file_bytes: u64,
        min_free_bytes: u64,
        interval: Duration,
    ) -> Bounds {
        Bounds {
            file,
            dir,
            max_file_bytes,
            min_free_bytes,
            interval,
            read_at: None,
            file_room: u64::MAX,
            free_bytes: u64::MAX,
            written: 0,
            full: None,
            used: None,
        }
    }

    fn unbounded(&self) -> bool {
        self.max_file_bytes == 0 && self.min_free_bytes == 0
    }

    /// Whether puts of `incoming` bytes may be written now.
    pub(super) fn admit(&mut self, incoming: u64, used: Used<'_>) -> Option<Limit> {
        if self.unbounded() {
            return None;
        }
        let estimate = verdict(
            self.file_room.saturating_sub(self.written),
            self.free_bytes.saturating_sub(self.written),
            cost(incoming),
            self.min_free_bytes,
        );
        if self.full.is_some() || estimate.is_some() || self.due() {
            self.read(used);
        }
        verdict(
            self.file_room,
            self.free_bytes,
            cost(incoming),
            self.reserve(),
        )
    }

    /// The free space puts must leave: `min_free_bytes`, twice that once
    /// full. Without the margin, a full store flapped: a small change (a
    /// subscription) fitted where the publication before it did not, and
    /// `/readyz` went back and forth; with it, the store stays full until
    /// space has really come back.
    fn reserve(&self) -> u64 {
        match self.full {
            Some(_) => self.min_free_bytes.saturating_mul(2),
            None => self.min_free_bytes,
        }
    }

    /// After a commit wrote puts of `bytes`.
    pub(super) fn wrote(&mut self, bytes: u64) {
        self.written = self.written.saturating_add(cost(bytes));
    }

    fn due(&self) -> bool {
        self.read_at.is_none_or(|at| at.elapsed() >= self.interval)
    }

    /// While full, read again when due: true when room came back.
    pub(super) fn recheck(&mut self, used: Used<'_>) -> bool {
        if self.full.is_none() || !self.due() {
            return false;
        }
        self.read(used);
        verdict(self.file_room, self.free_bytes, cost(0), self.reserve()).is_none()
    }

    fn read(&mut self, used: Used<'_>) {
        let now = Instant::now();
        self.read_at = Some(now);
        self.written = 0;
        self.free_bytes = free_bytes(&self.dir).unwrap_or(u64::MAX);
        let file_bytes = super::file_len(&self.file);
        let cached = self.used;
        let mut counted = None;
        self.file_room = file_room(self.max_file_bytes, file_bytes, || {
            let fresh = cached.filter(|(at, _)| now.duration_since(*at) < self.interval);
            match fresh {
                Some((_, bytes)) => Some(bytes),
                None => {
                    counted = used();
                    counted
                }
            }
        });
        if let Some(bytes) = counted {
            self.used = Some((now, bytes));
        }
    }
}

/// Bytes an unprivileged writer may still use on the filesystem of `dir`.
// statvfs has no std API: one call on a NUL-terminated path.
#[allow(unsafe_code)]
fn free_bytes(dir: &std::path::Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut stat = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
    // SAFETY: a valid C string and a buffer of the right type and size.
    let rc = unsafe { libc::statvfs(path.as_ptr(), stat.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: statvfs succeeded, so it filled the buffer.
    let stat = unsafe { stat.assume_init() };
    #[allow(clippy::unnecessary_cast)]
    Some((stat.f_bavail as u64).saturating_mul(stat.f_frsize as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_bound_refuses_what_would_pass_it() {
        assert_eq!(verdict(10, 1_000, 20, 0), Some(Limit::File));
        assert_eq!(verdict(10, 1_000, 10, 0), None);
        assert_eq!(verdict(u64::MAX, 100, 60, 50), Some(Limit::Free));
        assert_eq!(verdict(u64::MAX, 100, 50, 50), None);
        assert_eq!(verdict(u64::MAX, 0, 1 << 40, 0), None, "0: no bound");
    }

    #[test]
    fn near_the_bound_only_the_file_s_own_pages_are_room() {
        let none = || -> Option<u64> { panic!("not counted far from the bound") };
        assert_eq!(file_room(0, 1 << 40, none), u64::MAX, "0: no bound");
        assert_eq!(file_room(100, 40, none), 40, "one doubling, under it");
        assert_eq!(file_room(100, 10, none), 40, "up to half of 80");
        assert_eq!(file_room(100, 64, || Some(20)), 12, "half of 64, less 20");
        assert_eq!(file_room(100, 64, || Some(40)), 0);
        assert_eq!(file_room(100, 64, || None), 0, "uncounted: no room");
        let big = 6u64 << 30;
        assert_eq!(file_room(20 << 30, big, none), 7 << 30, "half of 6 + 8 GiB");
        assert_eq!(file_room(8 << 30, big, || Some(0)), big / 2);
    }

    #[test]
    fn the_filesystem_reports_free_space() {
        assert!(free_bytes(&std::env::temp_dir()).is_some_and(|b| b > 0));
    }
}
