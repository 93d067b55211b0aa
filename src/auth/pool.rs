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

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use super::cache::lock;
use super::scratch::Scratch;

/// A verification, given the thread's working memory.
type Work = Box<dyn FnOnce(&mut Scratch) -> bool + Send>;

struct Job {
    work: Work,
    reply: oneshot::Sender<bool>,
}

/// The queue was full: refused without a check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Full;

pub(crate) struct Pool {
    jobs: Sender<Job>,
    /// Jobs queued or running, at most `limit`; and queued only.
    pending: Arc<Counts>,
    /// Threads + queue.
    limit: usize,
    /// Verifications run, for tests and measurements.
    runs: Arc<AtomicU64>,
}

impl Pool {
    /// `threads` (at least one) that stop once the pool is dropped.
    pub(crate) fn new(threads: usize, queue: usize) -> Pool {
        let (jobs, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        let runs = Arc::new(AtomicU64::new(0));
        let pending = Arc::new(Counts::default());
        let threads = threads.max(1);
        let mut started = 0;
        for i in 0..threads {
            let (rx, runs, pending) = (rx.clone(), runs.clone(), pending.clone());
            let spawned = std::thread::Builder::new()
                .name(format!("lmos-auth-{i}"))
                .spawn(move || work(&rx, &runs, &pending));
            started += usize::from(spawned.is_ok());
        }
        // Without a thread every check is refused as busy; none hangs.
        let limit = if started == 0 { 0 } else { threads + queue };
        Pool {
            jobs,
            pending,
            limit,
            runs,
        }
    }

    /// Runs `work` on a pool thread; `Err(Full)` at once when every thread
    /// is busy and the queue full.
    #[cfg(test)]
    pub(crate) async fn run(
        &self,
        work: impl FnOnce(&mut Scratch) -> bool + Send + 'static,
    ) -> Result<bool, Full> {
        let answer = self.submit(work)?;
        Ok(answer.await.unwrap_or(false))
    }

    /// Hands `work` to a pool thread; `Err(Full)` at once when every
    /// thread is busy and the queue full. The answer comes on the receiver.
    pub(crate) fn submit(
        &self,
        work: impl FnOnce(&mut Scratch) -> bool + Send + 'static,
    ) -> Result<oneshot::Receiver<bool>, Full> {
        let admitted =
            self.pending
                .pending
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                    (n < self.limit).then_some(n + 1)
                });
        if admitted.is_err() {
            return Err(Full);
        }
        let (reply, answer) = oneshot::channel();
        let job = Job {
            work: Box::new(work),
            reply,
        };
        self.pending.queued.fetch_add(1, Ordering::AcqRel);
        match self.jobs.send(job) {
            Ok(()) => Ok(answer),
            Err(_) => {
                self.pending.queued.fetch_sub(1, Ordering::AcqRel);
                self.pending.pending.fetch_sub(1, Ordering::AcqRel);
                Err(Full)
            }
        }
    }

    pub(crate) fn runs(&self) -> u64 {
        self.runs.load(Ordering::Relaxed)
    }
}

#[derive(Default)]
struct Counts {
    pending: AtomicUsize,
    queued: AtomicUsize,
}

fn work(rx: &Mutex<Receiver<Job>>, runs: &AtomicU64, counts: &Counts) {
    let mut scratch = Scratch::default();
    loop {
        let next = lock(rx).recv();
        let Ok(job) = next else {
            return;
        };
        counts.queued.fetch_sub(1, Ordering::AcqRel);
        // The client left while its check waited (its connection closed):
        // nobody would read the answer.
        let passed = (!job.reply.is_closed()).then(|| {
            runs.fetch_add(1, Ordering::Relaxed);
            // A panic must not take the thread, and its place, with it.
            let work = std::panic::AssertUnwindSafe(|| (job.work)(&mut scratch));
            std::panic::catch_unwind(work).unwrap_or(false)
        });
        // Room for the next before the answer wakes anyone.
        counts.pending.fetch_sub(1, Ordering::AcqRel);
        if let Some(passed) = passed {
            let _ = job.reply.send(passed);
        }
        // Nothing waiting: give the working memory back.
        if counts.queued.load(Ordering::Acquire) == 0 {
            scratch.release();
        }
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
            .submit(move |_| {
                g.wait();
                true
            })
            .unwrap();
        // The thread took it (and waits at the barrier): the queue is empty.
        while pool.runs() == 0 {
            std::thread::yield_now();
        }
        let queued = pool.submit(|_| false).unwrap();
        assert_eq!(pool.submit(|_| true).err(), Some(Full));
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
            .submit(move |_| {
                g.wait();
                true
            })
            .unwrap();
        while pool.runs() == 0 {
            std::thread::yield_now();
        }
        drop(pool.submit(|_| true).unwrap());
        gate.wait();
        assert_eq!(running.await, Ok(true));
        assert_eq!(pool.run(|_| true).await, Ok(true));
        assert_eq!(pool.runs(), 2, "the abandoned one was not run");
    }
}
