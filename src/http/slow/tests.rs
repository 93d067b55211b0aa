use super::*;
use tokio::sync::mpsc;

/// A body whose chunks the test sends when it likes.
struct Trickle(mpsc::UnboundedReceiver<Bytes>, bool);

impl Body for Trickle {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match self.0.poll_recv(cx) {
            Poll::Ready(Some(b)) => Poll::Ready(Some(Ok(Frame::data(b)))),
            Poll::Ready(None) => {
                self.1 = true;
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.1
    }
}

fn trickle(
    limits: BodyLimits,
) -> (
    mpsc::UnboundedSender<Bytes>,
    Timed<Trickle>,
    Arc<Outcome>,
    Arc<Progress>,
    Waiting,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    let waiting = Waiting::default();
    let progress = waiting.track();
    let (body, outcome) = Timed::new(Trickle(rx, false), progress.clone(), limits);
    (tx, body, outcome, progress, waiting)
}

/// The next frame's data, or the cut.
async fn next(body: &mut Timed<Trickle>) -> Option<Result<usize, Cut>> {
    let frame = std::future::poll_fn(|cx| Pin::new(&mut *body).poll_frame(cx)).await?;
    Some(match frame {
        Ok(f) => Ok(f.into_data().map(|d| d.len()).unwrap_or(0)),
        Err(e) => Err(*e.downcast::<Cut>().expect("a cut")),
    })
}

const RATE: BodyLimits = BodyLimits {
    timeout: Duration::from_secs(30),
    min_rate: 100,
};

#[tokio::test(start_paused = true)]
async fn a_body_trickled_below_the_minimum_rate_is_cut_off() {
    let (tx, mut body, outcome, _progress, _waiting) = trickle(RATE);
    let started = Instant::now();
    let sender = tokio::spawn(async move {
        loop {
            if tx.send(Bytes::from_static(b"x")).is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
    let mut got = 0u64;
    let cut = loop {
        match next(&mut body).await.unwrap() {
            Ok(n) => got += n as u64,
            Err(cut) => break cut,
        }
    };
    assert_eq!(cut, Cut::TooSlow);
    // One second of grace, and a hundredth of a second per byte.
    assert!(
        started.elapsed() < Duration::from_millis(1100),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(outcome.cut.get(), Some(&Cut::TooSlow));
    assert_eq!(outcome.received.load(Ordering::Relaxed), got);
    assert_eq!(next(&mut body).await, Some(Err(Cut::TooSlow)));
    sender.abort();
}

#[tokio::test(start_paused = true)]
async fn a_body_at_the_rate_still_ends_at_the_timeout_and_none_without_a_minimum() {
    let limits = BodyLimits {
        timeout: Duration::from_secs(5),
        min_rate: 0,
    };
    let (tx, mut body, outcome, _progress, _waiting) = trickle(limits);
    let started = Instant::now();
    tokio::spawn(async move {
        while tx.send(Bytes::from_static(b"x")).is_ok() {
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    });
    let cut = loop {
        if let Err(cut) = next(&mut body).await.unwrap() {
            break cut;
        }
    };
    assert_eq!(cut, Cut::Timeout);
    assert_eq!(started.elapsed(), Duration::from_secs(5));
    assert_eq!(outcome.received.load(Ordering::Relaxed), 3);
}

#[tokio::test(start_paused = true)]
async fn a_prompt_body_passes_and_leaves_the_waiting_queue() {
    let (tx, mut body, outcome, progress, waiting) = trickle(RATE);
    assert_eq!(waiting.len(), 1);
    tx.send(Bytes::from(vec![b'x'; 1000])).unwrap();
    drop(tx);
    assert_eq!(next(&mut body).await, Some(Ok(1000)));
    assert_eq!(next(&mut body).await, None);
    assert_eq!(outcome.cut.get(), None);
    assert_eq!(waiting.len(), 0, "busy once the body is in");
    progress.waiting();
    assert_eq!(waiting.len(), 1, "waiting for the next request");
    drop((progress, body));
    assert_eq!(waiting.len(), 0);
}

#[tokio::test(start_paused = true)]
async fn the_longest_waiting_connection_makes_room_but_not_a_fresh_one() {
    let waiting = Waiting::default();
    let old = waiting.track();
    tokio::time::advance(Duration::from_millis(600)).await;
    let young = waiting.track();
    let busy = waiting.track();
    busy.busy();
    assert!(!waiting.evict_oldest(EVICT_AFTER), "nobody waited a second");
    tokio::time::advance(Duration::from_millis(500)).await;
    assert!(waiting.evict_oldest(EVICT_AFTER));
    assert!(old.evicted().is_cancelled());
    assert!(!young.evicted().is_cancelled());
    assert!(
        !waiting.evict_oldest(EVICT_AFTER),
        "the young one waited 0.5 s"
    );
    tokio::time::advance(Duration::from_millis(500)).await;
    assert!(waiting.evict_oldest(EVICT_AFTER));
    assert!(young.evicted().is_cancelled());
    assert!(
        !busy.evicted().is_cancelled(),
        "a busy connection is never chosen"
    );
    assert!(!waiting.evict_oldest(Duration::ZERO));
    // An evicted connection does not queue again.
    old.waiting();
    assert_eq!(waiting.len(), 0);
}

#[tokio::test(start_paused = true)]
async fn an_evicted_connection_cuts_its_body() {
    let (_tx, mut body, outcome, _progress, waiting) = trickle(RATE);
    tokio::time::advance(EVICT_AFTER).await;
    assert!(waiting.evict_oldest(EVICT_AFTER));
    assert_eq!(next(&mut body).await, Some(Err(Cut::Evicted)));
    assert_eq!(outcome.cut.get(), Some(&Cut::Evicted));
    let response = Cut::Evicted.response(RATE, 0);
    assert_eq!(response.status(), StatusCode::REQUEST_TIMEOUT);
    assert_eq!(response.headers()[header::CONNECTION], "close");
}
