//! The process's resources: memory given back after a wave of connections
//! leaves, and the file descriptors every connection needs.
//!
//! glibc's allocator keeps what thousands of closed connections freed in
//! its arenas, scattered between live allocations, and returns it to the
//! system only when asked (`malloc_trim`). The sidecar asks when the number
//! of open connections has fallen well below its recent peak, so a
//! reconnect storm or a deploy that drops every consumer does not leave the
//! process at its high-water mark for good (issue 16). Asking takes the
//! arenas' locks for a moment, so it is not done while connections come.

use std::time::Duration;

/// How often the open connections are looked at: a wave that comes and
/// goes between two looks is never seen. Every 10 s was enough while
/// 10 000 consumers took 10 s to connect; with the kernel's backlog no
/// longer dropping them (`crate::listen`) they connect in 2 s, and a
/// wave that stayed a few seconds left the process at its high-water mark
/// (140 MiB above its baseline, against 39 MiB). A look is a counter read.
pub const CHECK_EVERY: Duration = Duration::from_secs(1);

/// Connections that must have left since the peak before trimming is
/// worth a pause.
const WAVE: usize = 64;

/// Decides when to trim; pure.
#[derive(Debug, Default)]
pub struct Trimmer {
    peak: usize,
    /// Open connections at the last look.
    last: usize,
    /// Open connections when the last trim was for a wave that came.
    arrived: usize,
}

impl Trimmer {
    /// `open`: connections open now. True when a wave has left since the
    /// peak; the peak then starts again from here.
    /// Also true once a wave that came has settled (no change since the
    /// last look): connecting took memory that the connections no longer
    /// hold (handshakes, first read buffers, their wait for the broker),
    /// some 2 KiB of each idle MQTT client's 10 KiB (issue 32).
    pub fn after_check(&mut self, open: usize) -> bool {
        let settled = open == self.last;
        self.last = open;
        if open + WAVE <= self.peak {
            self.peak = open;
            self.arrived = open;
            true
        } else {
            self.peak = self.peak.max(open);
            if settled && open >= self.arrived + WAVE {
                self.arrived = open;
                return true;
            }
            false
        }
    }
}

/// Returns freed heap memory to the system, where the allocator can.
// malloc_trim has no safe binding: one libc call.
#[allow(unsafe_code)]
pub fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks and releases the allocator's own free
    // memory; it takes no pointers from us.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Raises the soft limit on open files to the hard limit: each WebSocket
/// consumer and each MQTT client costs one descriptor (its socket; the
/// guard reaches the embedded broker through direct links), and
/// distributions start processes at a soft limit (often 1 024) far below
/// what the sidecar's connection caps allow. Returns (soft, hard) as they
/// are after the attempt.
// getrlimit/setrlimit have no safe std API: two libc calls.
#[allow(unsafe_code)]
pub fn raise_open_files_limit() -> std::io::Result<(u64, u64)> {
    #[cfg(unix)]
    {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit/setrlimit read and write the struct we own.
        unsafe {
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if limit.rlim_cur < limit.rlim_max {
                let raised = libc::rlimit {
                    rlim_cur: limit.rlim_max,
                    rlim_max: limit.rlim_max,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                    limit = raised;
                }
            }
        }
        // rlim_t is u64 here, narrower or signed on some other systems.
        #[allow(clippy::unnecessary_cast)]
        Ok((limit.rlim_cur as u64, limit.rlim_max as u64))
    }
    #[cfg(not(unix))]
    Err(std::io::Error::from(std::io::ErrorKind::Unsupported))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trims_once_a_wave_has_left_and_not_while_connections_come() {
        let mut t = Trimmer::default();
        for open in [0, 100, 5_000, 10_000] {
            assert!(!t.after_check(open), "growing: {open}");
        }
        assert!(!t.after_check(9_990), "a few leaving");
        assert!(t.after_check(200), "a wave left");
        assert!(!t.after_check(200), "once");
        assert!(!t.after_check(150));
        assert!(t.after_check(0), "from the new peak");
    }

    #[test]
    fn trims_once_a_wave_that_came_has_settled() {
        let mut t = Trimmer::default();
        assert!(!t.after_check(0));
        assert!(!t.after_check(10), "a few came");
        assert!(!t.after_check(10), "too few to trim for");
        assert!(!t.after_check(5_000), "still coming");
        assert!(t.after_check(5_000), "settled");
        assert!(!t.after_check(5_000), "once");
        assert!(!t.after_check(5_030), "a few more");
        assert!(!t.after_check(5_030));
    }

    #[test]
    fn the_open_files_limit_ends_at_the_hard_limit() {
        let (soft, hard) = raise_open_files_limit().unwrap();
        assert_eq!(soft, hard);
    }
}
