//! The journal's bytes: a header line, then one framed record per line, and the scan that reads
//! them back and says, of every byte, whether it checks out.
//!
//! ```text
//! tapfinger-journal 2
//! <seq> <len> <crc32> <json>
//! ```
//!
//! `seq` is the record's commit number (each record one more than the one before, compaction
//! and repair included, so a gap is a record that went missing), `len` the JSON's length in bytes
//! and `crc32` (8 hex digits, CRC-32 of `seq` as 8 little-endian bytes followed by the JSON) its
//! checksum. A record is read only if all three agree: a changed digit, a flipped byte, a line cut
//! short or glued onto another fails the check instead of being read as something else. JSON
//! keeps the payload what operators and older agents knew; `tapfinger-agent journal dump` prints
//! it as JSON lines.
//!
//! Journals written before this format (bare JSON lines, first byte `{`) are read by
//! `scan_v1`, only to migrate them.

use super::Record;

/// The first line of a journal in this format.
pub(super) const HEADER: &[u8] = b"tapfinger-journal 2\n";

/// One record's line, newline included.
pub(super) fn encode(seq: u64, r: &Record) -> std::io::Result<Vec<u8>> {
    let json = serde_json::to_vec(r).map_err(std::io::Error::other)?;
    let mut line = format!("{seq} {} {:08x} ", json.len(), crc(seq, &json)).into_bytes();
    line.extend_from_slice(&json);
    line.push(b'\n');
    Ok(line)
}

fn crc(seq: u64, json: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&seq.to_le_bytes());
    h.update(json);
    h.finalize()
}

/// One line's record, if its frame and checksum check out and its JSON is a record.
fn decode(line: &[u8]) -> Option<(u64, Record)> {
    let mut parts = line.splitn(4, |b| *b == b' ');
    fn num(p: Option<&[u8]>) -> Option<&str> {
        std::str::from_utf8(p?).ok()
    }
    let seq: u64 = num(parts.next())?.parse().ok()?;
    let len: usize = num(parts.next())?.parse().ok()?;
    let sum = u32::from_str_radix(num(parts.next())?, 16).ok()?;
    let json = parts.next()?;
    if json.len() != len || crc(seq, json) != sum {
        return None;
    }
    Some((seq, serde_json::from_slice(json).ok()?))
}

/// A line that did not check out, with what can still be made out of it.
#[derive(Debug, Clone, PartialEq)]
pub struct Bad {
    /// 1-based line number.
    pub line: usize,
    /// Task id and name, where the damaged text still shows them.
    pub task: Option<u64>,
    /// The task's name (its spec's), where shown.
    pub name: Option<String>,
    /// The start of the line as text (invalid UTF-8 replaced), for the operator.
    pub text: String,
}

impl Bad {
    fn of(line: usize, bytes: &[u8]) -> Self {
        let text = String::from_utf8_lossy(bytes);
        Self {
            line,
            task: after(&text, "\"id\":").and_then(|s| {
                let digits: String = s.chars().take_while(char::is_ascii_digit).collect();
                digits.parse().ok()
            }),
            name: after(&text, "\"name\":\"")
                .map(|s| s.chars().take_while(|c| *c != '"').take(80).collect()),
            text: text.chars().take(200).collect(),
        }
    }

    /// `line N (task T "name")`, as far as known.
    pub fn describe(&self) -> String {
        let mut s = format!("line {}", self.line);
        match (&self.task, &self.name) {
            (Some(t), Some(n)) => s.push_str(&format!(" (task {t}, {n:?})")),
            (Some(t), None) => s.push_str(&format!(" (task {t})")),
            (None, Some(n)) => s.push_str(&format!(" ({n:?})")),
            (None, None) => {}
        }
        s
    }
}

fn after<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.find(key).map(|i| &text[i + key.len()..])
}

/// What a scan found.
#[derive(Debug, Default)]
pub(super) struct Scan {
    /// The records that check out, in order, with their commit numbers.
    pub records: Vec<(u64, Record)>,
    /// Damaged lines before the last good record (each a record lost to damage).
    pub damaged: Vec<Bad>,
    /// Numbers missing between good records: `(first, last)` of each gap.
    pub gaps: Vec<(u64, u64)>,
    /// Good records whose number is not above the one before (lines repeated or swapped):
    /// `(the one before, this one)`.
    pub disorder: Vec<(u64, u64)>,
    /// Lines after the last good record that do not check out (a torn write, garbage appended).
    pub tail: Vec<Bad>,
    /// Whether the last of them has no newline (what a write cut short leaves).
    pub tail_unterminated: bool,
    /// Bytes up to the end of the last good record (or the header).
    pub good_end: usize,
}

impl Scan {
    /// The last good record's commit number.
    pub(super) fn last_seq(&self) -> Option<u64> {
        self.records.last().map(|(s, _)| *s)
    }
}

/// Split `bytes` into lines: (1-based number, start, end without the newline, has a newline).
fn lines(bytes: &[u8]) -> impl Iterator<Item = (usize, usize, usize, bool)> + '_ {
    let mut start = 0;
    let mut number = 0;
    std::iter::from_fn(move || {
        if start >= bytes.len() {
            return None;
        }
        number += 1;
        let (end, whole) = match bytes[start..].iter().position(|b| *b == b'\n') {
            Some(i) => (start + i, true),
            None => (bytes.len(), false),
        };
        let line = (number, start, end, whole);
        start = if whole { end + 1 } else { end };
        Some(line)
    })
}

/// Read a journal in this format (any bytes: nothing here fails).
pub(super) fn scan(bytes: &[u8]) -> Scan {
    scan_with(bytes, true, decode)
}

/// A journal written before framing: JSON lines, read with the old rules (a torn last line is
/// cut off; any other unreadable line is damage), numbered in order.
pub(super) fn scan_v1(bytes: &[u8]) -> Scan {
    let mut n = 0;
    scan_with(bytes, false, |line| {
        let rec = serde_json::from_slice::<Record>(line).ok()?;
        n += 1;
        Some((n, rec))
    })
}

/// The lines of `bytes` (after the header, if `header`), each read with `read`: the records
/// that check out, the damaged lines between them, the gaps in their numbers, and what follows
/// the last good one.
fn scan_with(
    bytes: &[u8],
    header: bool,
    mut read: impl FnMut(&[u8]) -> Option<(u64, Record)>,
) -> Scan {
    let mut s = Scan::default();
    let mut pending: Vec<Bad> = Vec::new();
    let mut unterminated = false;
    for (number, start, end, whole) in lines(bytes) {
        let text = &bytes[start..end];
        if header && number == 1 && bytes[start..].starts_with(HEADER) {
            s.good_end = end + 1;
            continue;
        }
        if text.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match read(text) {
            Some((seq, rec)) => {
                match s.last_seq() {
                    Some(last) if seq > last + 1 => s.gaps.push((last + 1, seq - 1)),
                    Some(last) if seq <= last => s.disorder.push((last, seq)),
                    _ => {}
                }
                s.damaged.append(&mut pending);
                s.records.push((seq, rec));
                s.good_end = if whole { end + 1 } else { end };
            }
            None => {
                pending.push(Bad::of(number, text));
                unterminated = !whole;
            }
        }
    }
    // A record that checks out but has no newline was written whole: kept (`Store::open_with`
    // gives it its newline before the next append).
    s.tail = pending;
    s.tail_unterminated = unterminated && !s.tail.is_empty();
    s
}

/// Whether `bytes` are a journal from before framing.
pub(super) fn is_v1(bytes: &[u8]) -> bool {
    bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
}

/// A journal as JSON lines for operators (`tapfinger-agent journal dump`).
pub struct Dump {
    /// `{"seq":N,"record":{...}}` per record that checks out, in order.
    pub lines: Vec<String>,
    /// What does not check out.
    pub bad: Vec<Bad>,
}

/// Any journal's bytes (either format) as [`Dump`].
pub fn dump(bytes: &[u8]) -> Dump {
    let s = if is_v1(bytes) {
        scan_v1(bytes)
    } else {
        scan(bytes)
    };
    let lines = s
        .records
        .iter()
        .map(|(seq, r)| serde_json::json!({ "seq": seq, "record": r }).to_string())
        .collect();
    let mut bad = s.damaged;
    bad.extend(s.tail);
    Dump { lines, bad }
}
