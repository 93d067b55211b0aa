//! The threads that verify Argon2 hashes: a fixed few
//! (`auth.max_concurrent_verifications`), fed through a bounded queue
//! (`auth.verification_queue`). A check that finds the queue full is
//! refused at once instead of waiting, so a flood of attempts costs at
//! most (threads × Argon2's memory) and never blocks the async runtime.
//!
//! Threads of their own rather than tokio's blocking pool, which grows to
//! hundreds of threads: glibc gives each thread an arena of its own, and
//! every arena kept the 19 MiB each verification had freed (issue 30: 300
//! attempts took the process to 13 GiB, for good).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use super::cache::lock;

type Work = Box<dyn FnOnce() -> bool + Send>;

struct Job {
    work: Work,
    reply: oneshot::Sender<bool>,
}

/// The queue was full: refused without a check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Full;

pub(crate) struct Pool {
    jobs: SyncSender<Job>,
    /// Verifications run, for tests and measurements.
    runs: Arc<AtomicU64>,
}

impl Pool {
    /// `threads` (at least one) that stop once the pool is dropped.
    pub(crate) fn new(threads: usize, queue: usize) -> Pool {
        let (jobs, rx) = mpsc::sync_channel::<Job>(queue);
        let rx = Arc::new(Mutex::new(rx));
        let runs = Arc::new(AtomicU64::new(0));
        for i in 0..threads.max(1) {
            let (rx, runs) = (rx.clone(), runs.clone());
            // A thread that cannot start leaves the others to do the work;
            // with none, every check is refused as busy, never hangs.
            let _ = std::thread::Builder::new()
                .name(format!("lmos-auth-{i}"))
                .spawn(move || work(&rx, &runs));
        }
        Pool { jobs, runs }
    }

    /// Runs `work` on a pool thread; `Err(Full)` at once when every thread
    /// is busy and the queue full.
    #[cfg(test)]
    pub(crate) async fn run(
        &self,
        work: impl FnOnce() -> bool + Send + 'static,
    ) -> Result<bool, Full> {
        let answer = self.submit(work)?;
        // A thread that panicked dropped the reply: the check did not pass.
        Ok(answer.await.unwrap_or(false))
    }

    /// Hands `work` to a pool thread; `Err(Full)` at once when every
    /// thread is busy and the queue full. The answer comes on the receiver.
    pub(crate) fn submit(
        &self,
        work: impl FnOnce() -> bool + Send + 'static,
    ) -> Result<oneshot::Receiver<bool>, Full> {
        let (reply, answer) = oneshot::channel();
        let job = Job {
            work: Box::new(work),
            reply,
        };
        match self.jobs.try_send(job) {
            Ok(()) => Ok(answer),
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => Err(Full),
        }
    }

    pub(crate) fn runs(&self) -> u64 {
        self.runs.load(Ordering::Relaxed)
    }
}

fn work(rx: &Mutex<Receiver<Job>>, runs: &AtomicU64) {
    loop {
        let next = lock(rx).recv();
        let Ok(job) = next else {
            return;
        };
        // The client left while its check waited (its connection closed):
        // nobody would read the answer.
        if job.reply.is_closed() {
            continue;
        }
        runs.fetch_add(1, Ordering::Relaxed);
        let _ = job.reply.send((job.work)());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Barrier;

    #[tokio::test]
    async fn a_full_queue_refuses_at_once() {
        let pool = Pool::new(1, 1);
        let gate = Arc::new(Barrier::new(2));
        let g = gate.clone();
        let running = pool
            .submit(move || {
                g.wait();
                true
            })
            .unwrap();
        // The thread took it (and waits at the barrier): the queue is empty.
        while pool.runs() == 0 {
            std::thread::yield_now();
        }
        let queued = pool.submit(|| false).unwrap();
        assert_eq!(pool.submit(|| true).err(), Some(Full));
        gate.wait();
        assert_eq!(running.await, Ok(true));
        assert_eq!(queued.await, Ok(false));
        assert_eq!(pool.runs(), 2);
    }

    #[tokio::test]
    async fn a_check_nobody_waits_for_is_skipped() {
        let pool = Pool::new(1, 4);
        let gate = Arc::new(Barrier::new(2));
        let g = gate.clone();
        let running = pool
            .submit(move || {
                g.wait();
                true
            })
            .unwrap();
        while pool.runs() == 0 {
            std::thread::yield_now();
        }
        drop(pool.submit(|| true).unwrap());
        gate.wait();
        assert_eq!(running.await, Ok(true));
        assert_eq!(pool.run(|| true).await, Ok(true));
        assert_eq!(pool.runs(), 2, "the abandoned one was not run");
    }
}
