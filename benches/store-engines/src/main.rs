//! Scratch benchmark: redb vs fjall vs rusqlite(WAL) for lmos-sidecar issue 31.
//! Usage: store-engines <engine> <scenario> <dir> [args]
//! engines: redb | fjall | sqlite ; scenarios: see main().
use std::error::Error;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

type R<T> = Result<T, Box<dyn Error>>;
type Key = [u8; 16];

trait Store {
    /// One durable commit containing `puts` and `dels`.
    fn commit(&mut self, puts: &[(Key, &[u8])], dels: &[Key]) -> R<()>;
    /// Iterate all records in key order; returns (count, value bytes); checks order.
    fn scan(&mut self) -> R<(u64, u64)>;
    /// Explicit compaction the engine offers (if any).
    fn compact(&mut self) -> R<String>;
}

fn key(i: u64) -> Key {
    (i as u128).to_be_bytes()
}

struct Rng(u64);
impl Rng {
    fn fill(&mut self, buf: &mut [u8]) {
        for c in buf.chunks_mut(8) {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            let b = self.0.to_le_bytes();
            c.copy_from_slice(&b[..c.len()]);
        }
    }
}

// ---------------------------------------------------------------- redb
#[cfg(feature = "redb")]
mod e_redb {
    use super::*;
    use redb::{Database, Durability, ReadableDatabase, ReadableTable, TableDefinition};
    const T: TableDefinition<&[u8], &[u8]> = TableDefinition::new("q");
    pub struct S(pub Database);
    pub fn open(dir: &Path) -> R<S> {
        std::fs::create_dir_all(dir)?;
        let db = if std::env::var("REDB_CHECK").is_ok() {
            Database::builder().set_check_integrity_on_open(true).create(dir.join("db.redb"))?
        } else {
            Database::create(dir.join("db.redb"))?
        };
        Ok(S(db))
    }
    impl Store for S {
        fn commit(&mut self, puts: &[(Key, &[u8])], dels: &[Key]) -> R<()> {
            let mut tx = self.0.begin_write()?;
            tx.set_durability(Durability::Immediate)?;
            {
                let mut t = tx.open_table(T)?;
                for (k, v) in puts {
                    t.insert(&k[..], *v)?;
                }
                for k in dels {
                    t.remove(&k[..])?;
                }
            }
            tx.commit()?;
            Ok(())
        }
        fn scan(&mut self) -> R<(u64, u64)> {
            let tx = self.0.begin_read()?;
            let t = match tx.open_table(T) {
                Ok(t) => t,
                Err(redb::TableError::TableDoesNotExist(_)) => return Ok((0, 0)),
                Err(e) => return Err(e.into()),
            };
            let (mut n, mut b) = (0u64, 0u64);
            let mut last: Vec<u8> = Vec::new();
            for r in t.iter()? {
                let (k, v) = r?;
                assert!(k.value() > &last[..]);
                last.clear();
                last.extend_from_slice(k.value());
                n += 1;
                b += v.value().len() as u64;
            }
            Ok((n, b))
        }
        fn compact(&mut self) -> R<String> {
            let mut rounds = 0;
            while self.0.compact()? {
                rounds += 1;
                if rounds > 50 { break; }
            }
            Ok(format!("Database::compact() x{rounds}"))
        }
    }
}

// ---------------------------------------------------------------- fjall
#[cfg(feature = "fjall")]
mod e_fjall {
    use super::*;
    use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};
    pub struct S(pub Database, pub Keyspace);
    pub fn open(dir: &Path) -> R<S> {
        let db = Database::builder(dir).open()?;
        let ks = match std::env::var("FJALL_MEMTABLE_MB") {
            Ok(mb) => {
                let b = mb.parse::<u64>()? * 1024 * 1024;
                db.keyspace("q", || KeyspaceCreateOptions::default().max_memtable_size(b))?
            }
            Err(_) => db.keyspace("q", KeyspaceCreateOptions::default)?,
        };
        Ok(S(db, ks))
    }
    impl Store for S {
        fn commit(&mut self, puts: &[(Key, &[u8])], dels: &[Key]) -> R<()> {
            let mut b = self.0.batch().durability(Some(PersistMode::SyncAll));
            for (k, v) in puts {
                b.insert(&self.1, &k[..], *v);
            }
            for k in dels {
                b.remove(&self.1, &k[..]);
            }
            b.commit()?;
            Ok(())
        }
        fn scan(&mut self) -> R<(u64, u64)> {
            let (mut n, mut bytes) = (0u64, 0u64);
            let mut last: Vec<u8> = Vec::new();
            for g in self.1.iter() {
                let (k, v) = g.into_inner()?;
                assert!(&k[..] > &last[..]);
                last.clear();
                last.extend_from_slice(&k);
                n += 1;
                bytes += v.len() as u64;
            }
            Ok((n, bytes))
        }
        fn compact(&mut self) -> R<String> {
            self.1.rotate_memtable_and_wait()?;
            self.1.major_compact()?;
            self.0.persist(PersistMode::SyncAll)?;
            Ok("Keyspace::rotate_memtable_and_wait()+major_compact() (doc(hidden))".into())
        }
    }
}

// ---------------------------------------------------------------- sqlite
#[cfg(feature = "sqlite")]
mod e_sqlite {
    use super::*;
    use rusqlite::{Connection, params};
    pub struct S(pub Connection);
    pub fn open(dir: &Path) -> R<S> {
        std::fs::create_dir_all(dir)?;
        let c = Connection::open(dir.join("db.sqlite"))?;
        let mode: String = c.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
        assert_eq!(mode, "wal");
        c.execute_batch(
            "PRAGMA synchronous=FULL;
             CREATE TABLE IF NOT EXISTS q (k BLOB PRIMARY KEY, v BLOB NOT NULL) WITHOUT ROWID;",
        )?;
        Ok(S(c))
    }
    impl Store for S {
        fn commit(&mut self, puts: &[(Key, &[u8])], dels: &[Key]) -> R<()> {
            let tx = self.0.transaction()?;
            {
                let mut ins = tx.prepare_cached("INSERT INTO q (k, v) VALUES (?1, ?2)")?;
                for (k, v) in puts {
                    ins.execute(params![&k[..], v])?;
                }
                let mut del = tx.prepare_cached("DELETE FROM q WHERE k = ?1")?;
                for k in dels {
                    del.execute(params![&k[..]])?;
                }
            }
            tx.commit()?;
            Ok(())
        }
        fn scan(&mut self) -> R<(u64, u64)> {
            let mut st = self.0.prepare("SELECT k, v FROM q ORDER BY k")?;
            let mut rows = st.query([])?;
            let (mut n, mut bytes) = (0u64, 0u64);
            let mut last: Vec<u8> = Vec::new();
            while let Some(r) = rows.next()? {
                let k = r.get_ref(0)?.as_blob()?;
                let v = r.get_ref(1)?.as_blob()?;
                assert!(k > &last[..]);
                last.clear();
                last.extend_from_slice(k);
                n += 1;
                bytes += v.len() as u64;
            }
            Ok((n, bytes))
        }
        fn compact(&mut self) -> R<String> {
            self.0.execute_batch("PRAGMA wal_checkpoint(TRUNCATE); VACUUM; PRAGMA wal_checkpoint(TRUNCATE);")?;
            Ok("wal_checkpoint(TRUNCATE)+VACUUM".into())
        }
    }
}

fn open(engine: &str, dir: &Path) -> R<Box<dyn Store>> {
    match engine {
        #[cfg(feature = "redb")]
        "redb" => Ok(Box::new(e_redb::open(dir)?)),
        #[cfg(feature = "fjall")]
        "fjall" => Ok(Box::new(e_fjall::open(dir)?)),
        #[cfg(feature = "sqlite")]
        "sqlite" => Ok(Box::new(e_sqlite::open(dir)?)),
        "none" => Err("no engine".into()),
        _ => Err(format!("unknown/disabled engine {engine}").into()),
    }
}

/// Like `du -s --block-size=1`: allocated bytes, plus apparent size.
fn du(p: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let mut alloc = 0;
    let mut app = 0;
    if let Ok(m) = std::fs::symlink_metadata(p) {
        alloc += m.blocks() * 512;
        if m.is_dir() {
            if let Ok(rd) = std::fs::read_dir(p) {
                for e in rd.flatten() {
                    let (a, b) = du(&e.path());
                    alloc += a;
                    app += b;
                }
            }
        } else {
            app += m.len();
        }
    }
    (alloc, app)
}
/// Bytes this process caused to be written to storage (/proc/self/io write_bytes).
fn wbytes() -> u64 {
    std::fs::read_to_string("/proc/self/io").ok().and_then(|t| {
        t.lines().find(|l| l.starts_with("write_bytes:")).and_then(|l| l[12..].trim().parse().ok())
    }).unwrap_or(0)
}
fn mib(b: u64) -> String {
    format!("{:.1}MiB", b as f64 / 1048576.0)
}
fn dus(p: &Path) -> String {
    let (a, b) = du(p);
    format!("du={} apparent={}", mib(a), mib(b))
}

fn pct(v: &mut Vec<Duration>, p: f64) -> f64 {
    v.sort();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i].as_secs_f64() * 1000.0
}

/// Insert keys [from, to) in batches of `batch`; with `lag`, delete key i-lag in the same batch.
fn run_writes(s: &mut dyn Store, from: u64, to: u64, batch: u64, lag: Option<u64>, del_only: bool) -> R<(Duration, Vec<Duration>)> {
    let mut rng = Rng(0x9E3779B97F4A7C15);
    let mut vals = vec![0u8; 256 * batch as usize];
    let mut lat = Vec::new();
    let t0 = Instant::now();
    let mut i = from;
    while i < to {
        let end = (i + batch).min(to);
        rng.fill(&mut vals);
        let mut puts = Vec::with_capacity(batch as usize);
        let mut dels = Vec::new();
        for (j, n) in (i..end).enumerate() {
            if del_only {
                dels.push(key(n));
            } else {
                puts.push((key(n), &vals[j * 256..(j + 1) * 256]));
                if let Some(l) = lag {
                    if n >= l {
                        dels.push(key(n - l));
                    }
                }
            }
        }
        let t = Instant::now();
        s.commit(&puts, &dels)?;
        lat.push(t.elapsed());
        i = end;
    }
    Ok((t0.elapsed(), lat))
}

fn fresh(dir: &Path) -> R<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir)?;
    }
    std::fs::create_dir_all(dir.parent().unwrap())?;
    Ok(())
}

fn main() {
    if let Err(e) = real_main() {
        println!("ERROR display: {e}");
        println!("ERROR debug:   {e:?}");
        std::process::exit(2);
    }
}

fn real_main() -> R<()> {
    let a: Vec<String> = std::env::args().collect();
    if a.len() < 4 {
        return Err("usage: store-engines <engine> <scenario> <dir> [args]".into());
    }
    let (engine, scen, dir) = (a[1].as_str(), a[2].as_str(), PathBuf::from(&a[3]));
    let arg = |i: usize, d: u64| a.get(i).map(|s| s.parse::<u64>().unwrap()).unwrap_or(d);
    match scen {
        // append <dir> <batch> <n>
        "append" => {
            let (batch, n) = (arg(4, 64), arg(5, 200_000));
            fresh(&dir)?;
            let mut s = open(engine, &dir)?;
            let (el, mut lat) = run_writes(&mut *s, 0, n, batch, None, false)?;
            let commits = lat.len();
            let (p50, p99) = (pct(&mut lat, 0.5), pct(&mut lat, 0.99));
            drop(s);
            println!(
                "{engine} append batch={batch} n={n}: {:.2}s {:.0} rec/s {:.0} commits/s p50={p50:.2}ms p99={p99:.2}ms {} written={} (x{:.1} of payload)",
                el.as_secs_f64(), n as f64 / el.as_secs_f64(), commits as f64 / el.as_secs_f64(), dus(&dir), mib(wbytes()), wbytes() as f64 / (n as f64 * 272.0)
            );
        }
        // churn <dir> [n] [lag]
        "churn" => {
            let (n, lag) = (arg(4, 200_000), arg(5, 1000));
            fresh(&dir)?;
            let mut s = open(engine, &dir)?;
            let (el, mut lat) = run_writes(&mut *s, 0, n, 64, Some(lag), false)?;
            let (p50, p99) = (pct(&mut lat, 0.5), pct(&mut lat, 0.99));
            let live = format!("{} written={} (x{:.1} of payload)", dus(&dir), mib(wbytes()), wbytes() as f64 / (n as f64 * 272.0));
            drop(s);
            let closed = dus(&dir);
            let t = Instant::now();
            let mut s = open(engine, &dir)?;
            let (cnt, _) = s.scan()?;
            let reopen = t.elapsed();
            std::thread::sleep(Duration::from_secs(2));
            let reopened = dus(&dir);
            drop(s);
            println!(
                "{engine} churn n={n} lag={lag} batch=64: {:.2}s {:.0} rec/s (puts) p50={p50:.2}ms p99={p99:.2}ms | end(open): {live} | closed: {closed} | reopen+scan {:.0}ms live={cnt}, after reopen(+2s): {reopened} | after close: {}",
                el.as_secs_f64(), n as f64 / el.as_secs_f64(), reopen.as_secs_f64() * 1000.0, dus(&dir)
            );
        }
        // load <dir> [n] : fresh dir, n records in durable batches of 1024
        "load" => {
            let n = arg(4, 1_000_000);
            fresh(&dir)?;
            let mut s = open(engine, &dir)?;
            let (el, _) = run_writes(&mut *s, 0, n, 1024, None, false)?;
            drop(s);
            println!("{engine} load n={n} batch=1024: {:.2}s {:.0} rec/s {}", el.as_secs_f64(), n as f64 / el.as_secs_f64(), dus(&dir));
        }
        // recover <dir> : open + full ordered scan
        "recover" => {
            let t = Instant::now();
            let mut s = open(engine, &dir)?;
            let to = t.elapsed();
            let (n, b) = s.scan()?;
            let ts = t.elapsed();
            drop(s);
            println!("{engine} recover: open={:.1}ms open+scan={:.1}ms records={n} value_bytes={}", to.as_secs_f64() * 1000.0, ts.as_secs_f64() * 1000.0, mib(b));
        }
        // deleteall <dir> [n] : delete keys [0,n) in durable batches of 1024, then du, reopen, compact
        "deleteall" => {
            let n = arg(4, 1_000_000);
            let before = dus(&dir);
            let mut s = open(engine, &dir)?;
            let (el, _) = run_writes(&mut *s, 0, n, 1024, None, true)?;
            let live = dus(&dir);
            drop(s);
            let closed = dus(&dir);
            let mut s = open(engine, &dir)?;
            let (cnt, _) = s.scan()?;
            std::thread::sleep(Duration::from_secs(3));
            let reopened = dus(&dir);
            let t = Instant::now();
            let how = s.compact()?;
            let tc = t.elapsed();
            let compacted = dus(&dir);
            drop(s);
            println!(
                "{engine} deleteall n={n}: {:.2}s | full: {before} | after deletes(open): {live} | closed: {closed} | reopened(+3s) live={cnt}: {reopened} | {how} {:.0}ms: {compacted} | closed: {}",
                el.as_secs_f64(), tc.as_secs_f64() * 1000.0, dus(&dir)
            );
        }
        // hold <dir> <secs> : open and keep open
        "hold" => {
            let secs = arg(4, 3);
            let _s = open(engine, &dir)?;
            println!("{engine} hold: opened, holding {secs}s");
            std::thread::sleep(Duration::from_secs(secs));
        }
        // open <dir> : open + scan, report
        "open" => {
            let mut s = open(engine, &dir)?;
            let (n, _) = s.scan()?;
            println!("{engine} open: ok, {n} records");
            // second handle in same process
            match open(engine, &dir) {
                Ok(mut s2) => match s2.scan() {
                    Ok((n2, _)) => println!("{engine} second handle same process: OK ({n2} records)"),
                    Err(e) => println!("{engine} second handle same process: opened, scan err: {e} / {e:?}"),
                },
                Err(e) => println!("{engine} second handle same process: ERR {e} / {e:?}"),
            }
        }
        // write1 <dir> : one small durable commit (used for unwritable dir test)
        "write1" => {
            let mut s = open(engine, &dir)?;
            s.commit(&[(key(1), &[0u8; 256][..])], &[])?;
            println!("{engine} write1: ok");
        }
        _ => return Err(format!("unknown scenario {scen}").into()),
    }
    Ok(())
}
