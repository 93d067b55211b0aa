use futures_util::FutureExt;

use super::*;

fn config(dir: &Path) -> StoreConfig {
    StoreConfig {
        dir: dir.to_path_buf(),
        ..StoreConfig::default()
    }
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lmos-store-{name}-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test]
async fn what_was_durable_is_loaded_again_in_key_order() {
    let dir = temp_dir("reload");
    let store = Store::open(&config(&dir)).unwrap();
    let t = store.table("t");
    let _ = t.put(b"b".to_vec(), b"2".to_vec());
    let _ = t.put(b"a".to_vec(), b"1".to_vec());
    let _ = t.put(b"c".to_vec(), b"3".to_vec());
    let _ = t.put(b"d\0x".to_vec(), b"4".to_vec());
    let _ = t.put(b"d\0y".to_vec(), b"5".to_vec());
    let _ = t.delete_prefix(b"d\0".to_vec());
    let last = t.delete(b"c".to_vec());
    last.durable().await.unwrap();
    assert!(store.barrier().is_durable());
    store.close();
    drop((t, store));
    let again = Store::open(&config(&dir)).unwrap();
    assert_eq!(
        again.table("t").load().unwrap(),
        vec![
            (b"a".to_vec(), b"1".to_vec()),
            (b"b".to_vec(), b"2".to_vec())
        ]
    );
    assert!(again.table("never-written").load().unwrap().is_empty());
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn many_changes_share_few_commits() {
    let dir = temp_dir("group");
    let store = Store::open(&config(&dir)).unwrap();
    let t = store.table("t");
    let tickets: Vec<_> = (0u32..2_000)
        .map(|i| t.put(i.to_be_bytes().to_vec(), vec![0; 100]))
        .collect();
    for ticket in tickets {
        ticket.durable().await.unwrap();
    }
    let stats = store.stats().unwrap();
    assert_eq!(stats.changes.load(Ordering::Relaxed), 2_000);
    assert!(stats.commits.load(Ordering::Relaxed) < 2_000);
    assert_eq!(t.load().unwrap().len(), 2_000);
    store.close();
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_second_store_on_the_same_directory_is_refused_by_name() {
    let dir = temp_dir("lock");
    let first = Store::open(&config(&dir)).unwrap();
    let Err(e) = Store::open(&config(&dir)) else {
        panic!("opened twice");
    };
    assert!(matches!(e, StoreError::Locked { .. }), "{e}");
    assert!(e.to_string().contains(&dir.display().to_string()), "{e}");
    first.close();
    drop(first);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_directory_that_cannot_be_created_is_named_with_the_reason() {
    let file = std::env::temp_dir().join(format!("lmos-store-file-{}", uuid::Uuid::new_v4()));
    std::fs::write(&file, b"not a directory").unwrap();
    let Err(e) = Store::open(&config(&file.join("data"))) else {
        panic!("opened under a file");
    };
    let text = e.to_string();
    assert!(matches!(e, StoreError::Directory { .. }), "{text}");
    assert!(text.contains("cannot create it"), "{text}");
    std::fs::remove_file(file).unwrap();
}

#[test]
fn a_damaged_file_is_refused_not_emptied() {
    let dir = temp_dir("corrupt");
    std::fs::write(dir.join(FILE_NAME), vec![0x5a; 64 * 1024]).unwrap();
    let Err(e) = Store::open(&config(&dir)) else {
        panic!("opened a damaged file");
    };
    assert!(e.to_string().contains(FILE_NAME), "{e}");
    assert_eq!(
        std::fs::read(dir.join(FILE_NAME)).unwrap(),
        vec![0x5a; 64 * 1024]
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn memory_only_keeps_nothing_and_never_waits() {
    let store = Store::open(&StoreConfig {
        memory_only: true,
        ..StoreConfig::default()
    })
    .unwrap();
    assert!(!store.is_durable());
    let t = store.table("t");
    let ticket = t.put(b"k".to_vec(), b"v".to_vec());
    assert!(ticket.is_durable());
    ticket.durable().await.unwrap();
    assert!(t.load().unwrap().is_empty());
}

#[tokio::test]
async fn after_close_changes_fail_their_tickets() {
    let dir = temp_dir("closed");
    let store = Store::open(&config(&dir)).unwrap();
    store.close();
    let e = store
        .table("t")
        .put(b"k".to_vec(), b"v".to_vec())
        .durable()
        .await;
    assert!(matches!(e, Err(StoreError::Stopped)), "{e:?}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn damage_in_the_middle_of_a_written_store_is_an_error_not_a_panic() {
    let dir = temp_dir("damaged");
    let store = Store::open(&config(&dir)).unwrap();
    let t = store.table("t");
    let tickets: Vec<_> = (0u32..20_000)
        .map(|i| t.put(i.to_be_bytes().to_vec(), vec![7; 200]))
        .collect();
    for ticket in tickets {
        ticket.durable().await.unwrap();
    }
    store.close();
    drop((t, store));
    let path = dir.join(FILE_NAME);
    let mut bytes = std::fs::read(&path).unwrap();
    // Most of the file, past its header: whatever pages hold the data.
    let (from, to) = (bytes.len() / 4 / 4096 * 4096, bytes.len() * 3 / 4);
    for (i, b) in bytes[from..to].iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(31) ^ 0xa5;
    }
    std::fs::write(&path, &bytes).unwrap();
    let opened = std::panic::catch_unwind(|| Store::open(&config(&dir)).map(|s| s.close()));
    let e = match opened {
        Ok(Err(e)) => e,
        Ok(Ok(())) => panic!("a damaged store opened"),
        Err(_) => panic!("opening a damaged store panicked"),
    };
    assert!(matches!(e, StoreError::Corrupt { .. }), "{e}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn past_its_byte_budget_a_change_waits_for_the_writer_and_none_is_lost() {
    let dir = temp_dir("budget");
    let config = StoreConfig {
        max_queued_bytes: 64 * 1024,
        ..config(&dir)
    };
    let store = Store::open(&config).unwrap();
    let table = store.table("flood");
    // 4 MiB of changes nobody awaits, far past the 64 KiB budget, from a
    // std thread (rumqttd's router writes so): it blocks for room.
    let (s, t) = (store.clone(), table.clone());
    std::thread::spawn(move || {
        for i in 0u32..1024 {
            let _ = t.put(i.to_be_bytes().to_vec(), vec![7u8; 4096]);
            let queued = s.stats().unwrap().queued_bytes.load(Ordering::Relaxed);
            assert!(queued <= 64 * 1024 + 4100, "queued {queued}");
        }
    })
    .join()
    .unwrap();
    assert!(store.stats().unwrap().waits.load(Ordering::Relaxed) > 0);
    store.barrier().durable().await.unwrap();
    assert_eq!(table.load().unwrap().len(), 1024);
    store.close();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A scoped handle's barrier covers what went through it and its tables,
/// and does not wait for what others queued (issue 32: the broker's
/// acknowledgements waited for the gateway's history).
#[tokio::test]
async fn a_scoped_barrier_covers_its_own_changes_only() {
    let dir = temp_dir("scoped");
    let store = Store::open(&config(&dir)).unwrap();
    let broker = store.scoped();
    assert_eq!(broker.barrier().seq, 0, "nothing queued through it yet");
    let _ = broker.table("kept").put(b"k".to_vec(), b"1".to_vec());
    let others: Vec<_> = (0u32..200)
        .map(|i| {
            store
                .table("history")
                .put(i.to_be_bytes().to_vec(), vec![0; 100])
        })
        .collect();
    let barrier = broker.barrier();
    assert_eq!(
        barrier.seq, 1,
        "its own change, not the 200 queued after it"
    );
    assert!(store.barrier().seq > 200);
    barrier.durable().await.unwrap();
    assert_eq!(
        broker.table("kept").load().unwrap(),
        vec![(b"k".to_vec(), b"1".to_vec())]
    );
    for ticket in others {
        ticket.durable().await.unwrap();
    }
    store.close();
    std::fs::remove_dir_all(dir).unwrap();
}

/// Changes nothing waits for (the resume history) are committed without a
/// sync of their own (issue 32: syncing each batch of history was a fifth
/// of a WebSocket fan-out's CPU), synced with the next change something
/// waits for, and all on disk after a graceful close.
#[tokio::test]
async fn lazy_changes_ride_on_the_next_sync() {
    let dir = temp_dir("lazy");
    let store = Store::open(&config(&dir)).unwrap();
    let stats = store.stats().unwrap().clone();
    let (lazy, eager) = (store.lazy_table("lazy"), store.table("eager"));
    // A change something waits for is synced with its batch.
    eager
        .put(b"first".to_vec(), vec![])
        .durable()
        .await
        .unwrap();
    let before = stats.syncs.load(Ordering::Relaxed);
    for i in 0u32..50 {
        let ticket = lazy.put(i.to_be_bytes().to_vec(), vec![0; 100]);
        ticket.durable().await.unwrap();
    }
    assert_eq!(
        stats.syncs.load(Ordering::Relaxed),
        before,
        "no sync for them"
    );
    assert!(stats.commits.load(Ordering::Relaxed) > before);
    eager.put(b"then".to_vec(), vec![]).durable().await.unwrap();
    assert_eq!(stats.syncs.load(Ordering::Relaxed), before + 1);
    let _ = lazy.put(b"last".to_vec(), vec![]);
    store.close();
    drop((lazy, eager, store));
    let again = Store::open(&config(&dir)).unwrap();
    assert_eq!(again.table("lazy").load().unwrap().len(), 51);
    assert_eq!(again.table("eager").load().unwrap().len(), 2);
    again.close();
    std::fs::remove_dir_all(dir).unwrap();
}

fn bounded(dir: &Path, max_file_bytes: u64) -> StoreConfig {
    StoreConfig {
        max_file_bytes,
        min_free_bytes: 0,
        sync_interval_ms: 10,
        ..config(dir)
    }
}

/// Past `store.max_file_bytes` puts fail with `Full` and deletes go on;
/// once deletes made room, puts are written again without a restart
/// (issue 43: one failure failed every later change until a restart).
#[tokio::test]
async fn past_max_file_bytes_puts_are_refused_until_deletes_make_room() {
    let dir = temp_dir("max-file");
    let store = Store::open(&bounded(&dir, 4 * 1024 * 1024)).unwrap();
    let table = store.table("t");
    let mut refused = None;
    for i in 0u32..200 {
        let put = table.put(i.to_be_bytes().to_vec(), vec![1u8; 64 * 1024]);
        if let Err(e) = put.durable().await {
            refused = Some((i, e));
            break;
        }
    }
    let (last, e) = refused.expect("the bound was reached");
    assert!(
        matches!(&e, StoreError::Full { reason } if reason.contains("store.max_file_bytes")),
        "{e}"
    );
    let stats = store.stats().unwrap();
    assert_eq!(stats.full.load(Ordering::Relaxed), 1);
    assert!(stats.full_reason().is_some());
    assert!(stats.refused.load(Ordering::Relaxed) >= 1);
    let len = file_len(store.path().unwrap());
    assert!(len <= 4 * 1024 * 1024 + 64 * 1024, "{len} after {last}");
    let mark = store.mark();
    table.delete_prefix(Vec::new()).durable().await.unwrap();
    // The refused put does not fail what comes after it.
    store.barrier_since(mark).durable().await.unwrap();
    let mut again = None;
    for _ in 0..200 {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        if table
            .put(b"again".to_vec(), vec![2u8; 1024])
            .durable()
            .await
            .is_ok()
        {
            again = Some(());
            break;
        }
    }
    assert!(
        again.is_some(),
        "puts are written again after {last} refused"
    );
    assert_eq!(stats.full.load(Ordering::Relaxed), 0);
    assert_eq!(
        table.load().unwrap(),
        vec![(b"again".to_vec(), vec![2u8; 1024])]
    );
    store.close();
    std::fs::remove_dir_all(dir).unwrap();
}

/// A barrier fails for a failed change in its window, and not for one
/// before its mark.
#[tokio::test]
async fn a_barrier_fails_only_for_a_failure_since_its_mark() {
    let dir = temp_dir("window");
    // Every put is refused; deletes are written.
    let config = StoreConfig {
        min_free_bytes: u64::MAX / 2,
        ..bounded(&dir, 0)
    };
    let store = Store::open(&config).unwrap().scoped();
    let table = store.table("t");
    let before = store.mark();
    assert!(table
        .put(b"k".to_vec(), b"v".to_vec())
        .durable()
        .await
        .is_err());
    assert!(store.barrier_since(before).durable().await.is_err());
    let after = store.mark();
    table.delete(b"k".to_vec()).durable().await.unwrap();
    store.barrier_since(after).durable().await.unwrap();
    store.barrier().durable().await.unwrap();
    let settled = store.barrier_since(before).settle().await;
    assert!(settled.failed_since(before).is_some());
    assert!(settled.failed_since(after).is_none());
    store.close();
    std::fs::remove_dir_all(dir).unwrap();
}

/// `room()` waits while the writer's queue is past `store.max_queued_bytes`
/// and a commit wakes it; a put on a tokio worker never blocks.
#[tokio::test]
async fn room_waits_for_the_writer_and_a_commit_wakes_it() {
    let dir = temp_dir("room");
    let config = StoreConfig {
        max_queued_bytes: 1_000,
        ..config(&dir)
    };
    let store = Store::open(&config).unwrap();
    store.room().await;
    let stats = store.stats().unwrap().clone();
    // As if 2 000 bytes were queued and not yet taken.
    stats.queued_bytes.fetch_add(2_000, Ordering::Relaxed);
    let mut room = std::pin::pin!(store.room());
    assert!(room.as_mut().now_or_never().is_none(), "no room");
    // Never blocks here, though the queue is past its bound.
    let ticket = store.table("t").put(b"k".to_vec(), vec![0; 100]);
    assert!(ticket.is_durable() || stats.queued_bytes.load(Ordering::Relaxed) >= 2_000);
    stats.queued_bytes.fetch_sub(2_000, Ordering::Relaxed);
    ticket.durable().await.unwrap();
    // The wake-up came with the writer taking the put: the queue was
    // emptied since, and the next put's commit wakes it in any case.
    let _ = store.table("t").put(b"k".to_vec(), vec![0; 100]);
    tokio::time::timeout(std::time::Duration::from_secs(10), room)
        .await
        .expect("the commit woke it");
    store.close();
    std::fs::remove_dir_all(dir).unwrap();
}
