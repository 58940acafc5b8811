//! Test kit (feature `testkit`): in-process bookies that keep no data, to
//! measure the client at any size without disks, and a raw writer of
//! unconfirmed entries (a writer that crashed before confirming anything).
//!
//! [`FakeBookies`] speak protocol version 2 on loopback ports and register in a
//! metadata store as real bookies do (`<root>/available/<host:port>`). They
//! acknowledge every add without storing it, and answer reads of a ledger
//! declared with [`FakeBookies::generate`] with entries built from their ids
//! ([`generated_payload`]) and a valid digest; entry `-1` (the last add
//! confirmed read, with or without fencing) answers the last entry. Reads of
//! other ledgers, or past the declared count, answer "no such entry". Any
//! other request (a batched read among them) closes the connection, as a
//! bookie older than BookKeeper 4.17 does.

use std::collections::HashMap;
use std::sync::Arc;

use bkswitch_bk_client::{BkError, BkErrorKind, DigestType};
use bkswitch_metadata_store::{ExpectedVersion, MemoryStore, MetadataStore};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::digest::{master_key, DigestManager};
use crate::wire::codec::{
    decode_response, encode_add, header_word, rc, split_frame, EntryHeader, OP_ADD, OP_READ,
};
use crate::{BookKeeperClient, ClientConfig};

/// What a fake bookie answers for one ledger.
#[derive(Debug, Clone, Copy)]
struct Generated {
    count: i64,
    entry_size: usize,
    digest: DigestType,
}

type Ledgers = Arc<Mutex<HashMap<i64, Generated>>>;

/// Bookies in this process that store nothing (see the module's doc).
#[derive(Debug)]
pub struct FakeBookies {
    ids: Vec<String>,
    ledgers: Ledgers,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl FakeBookies {
    /// Starts `count` bookies on loopback ports and registers them as writable
    /// under `ledgers_root` (creating the root and `available` when missing).
    ///
    /// # Errors
    /// A port cannot be bound, or the store refuses the registrations.
    pub async fn start(
        store: &Arc<dyn MetadataStore>,
        ledgers_root: &str,
        count: usize,
    ) -> Result<FakeBookies, BkError> {
        let fail = |what: String| BkError::new(BkErrorKind::Other, what);
        let mut path = String::new();
        for part in ledgers_root
            .split('/')
            .filter(|p| !p.is_empty())
            .chain(["available"])
        {
            path.push('/');
            path.push_str(part);
            let _ = store.put(&path, b"", ExpectedVersion::NotExists).await;
        }
        let ledgers: Ledgers = Arc::default();
        let mut ids = Vec::new();
        let mut tasks = Vec::new();
        for _ in 0..count {
            let listener = TcpListener::bind("127.0.0.1:0")
                .await
                .map_err(|e| fail(format!("cannot bind a fake bookie: {e}")))?;
            let id = listener
                .local_addr()
                .map_err(|e| fail(format!("fake bookie address: {e}")))?
                .to_string();
            store
                .put(&format!("{path}/{id}"), b"", ExpectedVersion::NotExists)
                .await
                .map_err(|e| fail(format!("registering fake bookie {id}: {e}")))?;
            let ledgers = ledgers.clone();
            tasks.push(tokio::spawn(async move {
                while let Ok((socket, _)) = listener.accept().await {
                    tokio::spawn(serve(socket, ledgers.clone()));
                }
            }));
            ids.push(id);
        }
        Ok(FakeBookies {
            ids,
            ledgers,
            tasks,
        })
    }

    /// `count` fake bookies registered in a new [`MemoryStore`] under
    /// `/ledgers`, and a client of them with `config`: the whole set-up of a
    /// test of the client without a cluster.
    ///
    /// # Errors
    /// As [`FakeBookies::start`] and [`BookKeeperClient::with_store`].
    pub async fn with_client(
        count: usize,
        config: ClientConfig,
    ) -> Result<(FakeBookies, BookKeeperClient), BkError> {
        let store: Arc<dyn MetadataStore> = Arc::new(MemoryStore::new());
        let fakes = FakeBookies::start(&store, "/ledgers", count).await?;
        // The address in the URI is not used: the client reads `store`.
        let bk =
            BookKeeperClient::with_store(store, "zk+hierarchical://127.0.0.1:2181/ledgers", config)
                .await?;
        Ok((fakes, bk))
    }

    /// The bookies' ids (`127.0.0.1:port`).
    pub fn ids(&self) -> &[String] {
        &self.ids
    }

    /// From now on, reads of `ledger_id` answer entries `0..count` of
    /// `entry_size` bytes ([`generated_payload`]) with `digest` and an empty
    /// password, each with last add confirmed `-1`.
    pub fn generate(&self, ledger_id: i64, count: i64, entry_size: usize, digest: DigestType) {
        self.ledgers.lock().insert(
            ledger_id,
            Generated {
                count,
                entry_size,
                digest,
            },
        );
    }
}

impl Drop for FakeBookies {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// The payload of entry `entry` of a generated ledger: `size` bytes starting
/// at `entry % 251` in a fixed pattern (no allocation: a slice of a static).
pub fn generated_payload(entry: i64, size: usize) -> Bytes {
    static PATTERN: std::sync::OnceLock<Bytes> = std::sync::OnceLock::new();
    let pattern = PATTERN.get_or_init(|| {
        Bytes::from(
            (0..(crate::wire::codec::MAX_FRAME_LEN + 256))
                .map(|i| (i % 251) as u8)
                .collect::<Vec<u8>>(),
        )
    });
    let at = entry.rem_euclid(251) as usize;
    pattern.slice(at..at + size)
}

async fn serve(socket: TcpStream, ledgers: Ledgers) {
    let _ = socket.set_nodelay(true);
    let (mut read, mut write) = socket.into_split();
    let mut buf = BytesMut::with_capacity(1 << 16);
    let mut digests: HashMap<DigestType, DigestManager> = HashMap::new();
    loop {
        let mut out = BytesMut::new();
        loop {
            let frame = match split_frame(&mut buf) {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(_) => return,
            };
            if !answer(frame, &ledgers, &mut digests, &mut out) {
                // An unknown request: close, as bookies before 4.17 do.
                return;
            }
            // Answer in slices, so that the fake's own buffers stay small.
            if out.len() >= 1 << 20 {
                if write.write_all(&out).await.is_err() {
                    return;
                }
                out.clear();
            }
        }
        if !out.is_empty() && write.write_all(&out).await.is_err() {
            return;
        }
        drop(out);
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(1 << 16);
        }
        match read.read_buf(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

fn answer(
    mut frame: Bytes,
    ledgers: &Ledgers,
    digests: &mut HashMap<DigestType, DigestManager>,
    out: &mut BytesMut,
) -> bool {
    if frame.len() < 4 {
        return true;
    }
    let word = frame.get_u32();
    let op = ((word >> 16) & 0xff) as u8;
    let put_head = |out: &mut BytesMut, len: usize, op: u8, code: i32, ledger: i64, entry: i64| {
        out.put_u32((24 + len) as u32);
        out.put_u32(header_word(op, 0));
        out.put_i32(code);
        out.put_i64(ledger);
        out.put_i64(entry);
    };
    match op {
        OP_ADD => {
            if frame.len() < 20 + 16 {
                return true;
            }
            frame.advance(20); // master key
            let (ledger, entry) = (frame.get_i64(), frame.get_i64());
            put_head(out, 0, OP_ADD, rc::EOK, ledger, entry);
        }
        OP_READ => {
            if frame.len() < 16 {
                return true;
            }
            let (ledger, asked) = (frame.get_i64(), frame.get_i64());
            let generated = ledgers.lock().get(&ledger).copied();
            let entry = if asked == -1 {
                generated.map_or(-1, |g| g.count - 1)
            } else {
                asked
            };
            match generated {
                Some(g) if entry >= 0 && entry < g.count => {
                    let digest = digests
                        .entry(g.digest)
                        .or_insert_with(|| DigestManager::new(g.digest, b""));
                    let payload = generated_payload(entry, g.entry_size);
                    let header = EntryHeader {
                        ledger_id: ledger,
                        entry_id: entry,
                        last_add_confirmed: -1,
                        length: (entry + 1) * g.entry_size as i64,
                    };
                    let body = stored_entry(digest, header, &payload);
                    put_head(out, body.len(), OP_READ, rc::EOK, ledger, asked);
                    out.put_slice(&body);
                }
                _ => put_head(out, 0, OP_READ, rc::ENOENTRY, ledger, asked),
            }
        }
        _ => return false,
    }
    true
}

/// An entry as a bookie stores it: header, digest, payload.
fn stored_entry(digest: &DigestManager, header: EntryHeader, payload: &[u8]) -> Bytes {
    // The ADD frame carries the same bytes after its length, header word and
    // master key.
    let frame = encode_add(&[0; 20], digest, header, payload, 0);
    frame.slice(4 + 4 + 20..)
}

/// Writes entries `0..count` of `ledger_id` straight to the bookie at
/// `address` with last add confirmed `-1` and an empty password (what a
/// writer that crashed before confirming anything leaves), `window` requests
/// in flight.
///
/// # Errors
/// The bookie cannot be reached, refuses an entry or closes the connection.
pub async fn write_unconfirmed(
    address: &str,
    ledger_id: i64,
    digest_type: DigestType,
    count: i64,
    payload: &Bytes,
    window: usize,
) -> Result<(), BkError> {
    let fail = |what: String| BkError::new(BkErrorKind::Other, what).with_ledger(ledger_id);
    let digest = DigestManager::new(digest_type, b"");
    let key = master_key(b"");
    let stream = TcpStream::connect(address)
        .await
        .map_err(|e| fail(format!("cannot connect to bookie {address}: {e}")))?;
    let _ = stream.set_nodelay(true);
    let (mut read, mut write) = stream.into_split();
    let (acked_tx, mut acked_rx) = tokio::sync::mpsc::unbounded_channel::<Result<(), String>>();
    let reader = tokio::spawn(async move {
        let mut buf = BytesMut::with_capacity(1 << 16);
        let mut got = 0i64;
        while got < count {
            while let Some(frame) = split_frame(&mut buf).map_err(|e| e.to_string())? {
                let r = decode_response(frame).map_err(|e| e.to_string())?;
                if (r.op, r.rc) != (OP_ADD, rc::EOK) {
                    let e = format!("bookie refused entry {} with code {}", r.entry_id, r.rc);
                    let _ = acked_tx.send(Err(e.clone()));
                    return Err(e);
                }
                got += 1;
                let _ = acked_tx.send(Ok(()));
            }
            if got < count && read.read_buf(&mut buf).await.map_err(|e| e.to_string())? == 0 {
                return Err(format!(
                    "the bookie closed the connection after {got} answers"
                ));
            }
        }
        Ok(())
    });
    let mut inflight = 0;
    let mut out = BytesMut::new();
    for entry in 0..count {
        while inflight >= window.max(1) {
            match acked_rx.recv().await {
                Some(Ok(())) => inflight -= 1,
                Some(Err(e)) => return Err(fail(e)),
                None => break,
            }
        }
        out.extend_from_slice(&encode_add(
            &key,
            &digest,
            EntryHeader {
                ledger_id,
                entry_id: entry,
                last_add_confirmed: -1,
                length: (entry + 1) * payload.len() as i64,
            },
            payload,
            0,
        ));
        inflight += 1;
        if out.len() >= 1 << 16 || inflight >= window || entry + 1 == count {
            write
                .write_all(&out)
                .await
                .map_err(|e| fail(format!("writing to bookie {address}: {e}")))?;
            out.clear();
        }
    }
    reader
        .await
        .map_err(|e| fail(format!("reader task: {e}")))?
        .map_err(fail)
}
