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
    // 4 MiB of changes nobody awaits, far past the 64 KiB budget.
    for i in 0u32..1024 {
        let _ = table.put(i.to_be_bytes().to_vec(), vec![7u8; 4096]);
        let queued = store.stats().unwrap().queued_bytes.load(Ordering::Relaxed);
        assert!(queued <= 64 * 1024 + 4100, "queued {queued}");
    }
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
