//! The acknowledgement log of `serve --ack-log FILE`: one line per publish
//! the managed ledger acknowledged, appended before the traffic counts it, so
//! that what a process was told is known even after it is killed with
//! `SIGKILL` (the line is in the file once `write(2)` returned; only a crash
//! of the machine loses it).
//!
//! A line is `ack <topic> <ledger id> <entry id> <incarnation> <sequence>
//! <bytes>`: where the entry was acknowledged, and what it holds — the payload
//! is [`encode_payload`]`(incarnation, sequence, bytes)`, so a checker can
//! read the entry back and compare every byte.
//!
//! The file is opened with `O_APPEND` and every line is one `write(2)`:
//! producers of several topics (and several processes) may share one file
//! without interleaving lines.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use bytes::Bytes;

use crate::traffic::encode_payload;

/// One acknowledged publish.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct AckRecord {
    /// The topic (managed-ledger name).
    pub topic: String,
    /// The ledger the entry was acknowledged in.
    pub ledger_id: i64,
    /// The entry id in that ledger.
    pub entry_id: i64,
    /// The producer incarnation of the payload.
    pub incarnation: u64,
    /// The producer's sequence number of the payload.
    pub seq: u64,
    /// The payload's size in bytes.
    pub size: usize,
}

impl AckRecord {
    /// The line written to the log, with its newline.
    pub fn line(&self) -> String {
        format!(
            "ack {} {} {} {} {} {}\n",
            self.topic, self.ledger_id, self.entry_id, self.incarnation, self.seq, self.size
        )
    }

    /// Parses one line of an acknowledgement log (with or without its
    /// newline); `None` when it is not one.
    pub fn parse(line: &str) -> Option<AckRecord> {
        let mut words = line.split_whitespace();
        if words.next()? != "ack" {
            return None;
        }
        let record = AckRecord {
            topic: words.next()?.to_owned(),
            ledger_id: words.next()?.parse().ok()?,
            entry_id: words.next()?.parse().ok()?,
            incarnation: words.next()?.parse().ok()?,
            seq: words.next()?.parse().ok()?,
            size: words.next()?.parse().ok()?,
        };
        words.next().is_none().then_some(record)
    }

    /// The payload the acknowledged entry holds.
    pub fn payload(&self) -> Bytes {
        encode_payload(self.incarnation, self.seq, self.size)
    }
}

/// An acknowledgement log open for appending.
#[derive(Debug)]
pub struct AckLog {
    file: File,
    path: PathBuf,
}

impl AckLog {
    /// Opens (creating it when missing) `path` for appending.
    ///
    /// # Errors
    ///
    /// When the file cannot be opened for appending.
    pub fn open(path: &Path) -> std::io::Result<AckLog> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(AckLog {
            file,
            path: path.to_owned(),
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends `record`'s line in one write.
    ///
    /// # Errors
    ///
    /// When the write fails or is short (then nothing may be claimed about
    /// the publish).
    pub fn record(&self, record: &AckRecord) -> std::io::Result<()> {
        let line = record.line();
        let written = (&self.file).write(line.as_bytes())?;
        if written != line.len() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::WriteZero,
                format!(
                    "short write to the ack log: {written} of {} bytes",
                    line.len()
                ),
            ));
        }
        Ok(())
    }

    /// Every record of the log at `path`, and the lines that are not
    /// records.
    ///
    /// # Errors
    ///
    /// When the file cannot be read.
    pub fn read(path: &Path) -> std::io::Result<AckLogContents> {
        let text = std::fs::read_to_string(path)?;
        let mut out = AckLogContents::default();
        for (i, line) in text.lines().enumerate() {
            match AckRecord::parse(line) {
                Some(r) => out.records.push(r),
                None => out.bad_lines.push((i + 1, line.to_owned())),
            }
        }
        Ok(out)
    }
}

/// What [`AckLog::read`] found in a log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AckLogContents {
    /// The records, in the order written.
    pub records: Vec<AckRecord>,
    /// The lines that are not records, with their 1-based numbers.
    pub bad_lines: Vec<(usize, String)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_parses_back_and_names_its_payload() {
        let r = AckRecord {
            topic: "tenant/ns/persistent/t".into(),
            ledger_id: 1_000_000_007,
            entry_id: 41,
            incarnation: 17,
            seq: 9,
            size: 256,
        };
        assert_eq!(AckRecord::parse(&r.line()), Some(r.clone()));
        assert_eq!(r.payload(), encode_payload(17, 9, 256));
        assert_eq!(AckRecord::parse("ack t 1 2 3 4"), None);
        assert_eq!(AckRecord::parse("ack t 1 2 3 4 5 6"), None);
        assert_eq!(AckRecord::parse("nack t 1 2 3 4 5"), None);
    }

    #[test]
    fn records_are_appended_one_line_each() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("acks");
        std::fs::write(&path, "ack t 1 0 5 1 16\n").unwrap();
        let log = AckLog::open(&path).unwrap();
        let r = AckRecord {
            topic: "t".into(),
            ledger_id: 1,
            entry_id: 1,
            incarnation: 5,
            seq: 2,
            size: 16,
        };
        log.record(&r).unwrap();
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"ack t torn")
            .unwrap();
        let read = AckLog::read(&path).unwrap();
        assert_eq!(read.records.len(), 2);
        assert_eq!(read.records[1], r);
        assert_eq!(read.bad_lines, vec![(3, "ack t torn".to_owned())]);
    }
}
