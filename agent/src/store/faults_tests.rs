//! The store under damage: a journal truncated at every byte (record boundaries and mid-record),
//! emptied, deleted, restored from an older copy, bytes flipped, a digit changed, garbage
//! appended, any bytes given to the repair. Each case either opens with every acknowledged
//! record, or refuses naming the loss; the repair never fails and the agent opens after it.

use super::*;

fn task(id: u64) -> Task {
    let mut t = Task::new(id, [1, 0, 0]).on(&[1]);
    t.arrival = id;
    t
}

fn spec(name: &str) -> TaskSpec {
    TaskSpec::from_toml(&format!(
        "name = \"{name}\"\ncommand = [\"x\"]\nmin_demand = {{ cpu = 1 }}\n"
    ))
    .unwrap()
}

fn done() -> Finish {
    Finish {
        node: NodeId(1),
        code: Some(0),
        epoch: 1,
    }
}

/// A journal of 6 accepted tasks, 1..=3 finished, 4 running here: its path and bytes.
fn written(dir: &Path) -> (PathBuf, Vec<u8>) {
    let path = dir.join("tasks.journal");
    let (mut s, _) = Store::open(&path).unwrap();
    for id in 1..=6 {
        s.accepted(&task(id), &spec(&format!("job-{id}"))).unwrap();
    }
    for id in 1..=3 {
        s.outcome(TaskId(id), done()).unwrap();
    }
    s.run(&Run {
        task: task(4),
        spec: spec("job-4"),
        epoch: 7,
        alloc: Resources(vec![1, 0, 0]),
        gpus: Vec::new(),
        handle: None,
    })
    .unwrap();
    drop(s);
    let bytes = std::fs::read(&path).unwrap();
    (path, bytes)
}

fn unfinished(r: &Recovered) -> Vec<u64> {
    r.unfinished().iter().map(|(t, _)| t.id.0).collect()
}

fn expect_lost(path: &Path, what: &str) -> String {
    match Store::open(path) {
        Err(e @ StoreError::Lost { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains("tapfinger-agent repair-journal"),
                "{what}: {msg}"
            );
            msg
        }
        Err(e) => panic!("{what}: refused, but not as a loss: {e}"),
        Ok((_, r)) => panic!(
            "{what}: opened with records missing (unfinished {:?})",
            unfinished(&r)
        ),
    }
}

#[test]
fn a_journal_cut_short_anywhere_is_refused_as_a_loss_never_read_as_a_torn_write() {
    let dir = tempfile::tempdir().unwrap();
    let (path, bytes) = written(dir.path());
    let whole = Store::open(&path).map(|(_, r)| unfinished(&r)).unwrap();
    assert_eq!(whole, vec![5, 6]);
    let boundaries: Vec<usize> = bytes
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == b'\n')
        .map(|(i, _)| i + 1)
        .collect();
    assert_eq!(boundaries.len(), 1 + 10, "header and ten records");
    let counter = std::fs::read(commit::counter_path(&path)).unwrap();
    println!("a journal of {} bytes, cut at every byte", bytes.len());
    for cut in 0..bytes.len() {
        std::fs::write(&path, &bytes[..cut]).unwrap();
        std::fs::write(commit::counter_path(&path), &counter).unwrap();
        let what = format!("cut at byte {cut} of {}", bytes.len());
        if cut == bytes.len() - 1 {
            // Only the last newline gone: every record still checks out.
            let (_, r) = Store::open(&path).unwrap();
            assert_eq!(unfinished(&r), vec![5, 6], "{what}");
            assert_eq!(
                std::fs::read(&path).unwrap(),
                bytes,
                "{what}: newline restored"
            );
        } else {
            let msg = expect_lost(&path, &what);
            assert!(msg.contains("but 10 were committed"), "{what}: {msg}");
        }
    }
    // Accepting the loss of a journal cut in the middle of task 6's record: every record before
    // it is kept, numbering continues after task 6, and the agent opens.
    let mid = boundaries[6] - 20;
    std::fs::write(&path, &bytes[..mid]).unwrap();
    std::fs::write(commit::counter_path(&path), &counter).unwrap();
    let rep = compact::repair(&path).unwrap();
    assert_eq!(rep.kept, 5);
    assert_eq!(rep.missing, vec![(6, 10)]);
    assert_eq!(rep.dropped.len(), 1, "the cut record");
    assert_eq!(rep.dropped[0].task, Some(6));
    assert_eq!(rep.dropped[0].name.as_deref(), Some("job-6"));
    let (_, r) = Store::open(&path).unwrap();
    assert_eq!(unfinished(&r), vec![1, 2, 3, 4, 5]);
    assert_eq!(r.last_id, Some(TaskId(6)), "ids never go back");
}

#[test]
fn an_emptied_deleted_or_older_journal_is_a_loss() {
    let dir = tempfile::tempdir().unwrap();
    let (path, bytes) = written(dir.path());
    std::fs::write(&path, b"").unwrap();
    expect_lost(&path, "emptied");
    std::fs::remove_file(&path).unwrap();
    let msg = expect_lost(&path, "deleted");
    assert!(msg.contains("ends at commit 0"), "{msg}");
    // A copy taken after four records, put back.
    let four = bytes
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == b'\n')
        .nth(4)
        .unwrap()
        .0;
    std::fs::write(&path, &bytes[..=four]).unwrap();
    expect_lost(&path, "an older copy");
    // The deleted journal's loss accepted: an empty journal that numbers after task 6.
    std::fs::remove_file(&path).unwrap();
    let rep = compact::repair(&path).unwrap();
    assert!(rep.backup.is_none() && rep.kept == 0, "{rep:?}");
    let (_, r) = Store::open(&path).unwrap();
    assert!(r.accepted.is_empty());
    assert_eq!(r.last_id, Some(TaskId(6)));
}

#[test]
fn flipped_bytes_and_a_changed_digit_are_named_and_repaired_around() {
    let dir = tempfile::tempdir().unwrap();
    let (path, bytes) = written(dir.path());
    let text = String::from_utf8(bytes.clone()).unwrap();
    // Six bytes flipped in the middle of task 3's record.
    let at = text.find("job-3").unwrap() - 30;
    let mut flipped = bytes.clone();
    for b in &mut flipped[at..at + 6] {
        *b ^= 0xA5;
    }
    std::fs::write(&path, &flipped).unwrap();
    let Err(e) = Store::open(&path) else {
        panic!("opened a journal with flipped bytes");
    };
    let msg = e.to_string();
    assert!(
        matches!(e, StoreError::Corrupt { line: 4, .. }) && msg.contains("job-3"),
        "{msg}"
    );
    // A digit changed (still valid JSON): the cpu of task 5's demand.
    let five = text.find("job-5").unwrap();
    let line_start = text[..five].rfind('\n').unwrap() + 1;
    let digit = line_start + text[line_start..].find("\"min_demand\":[1").unwrap() + 14;
    let mut changed = bytes.clone();
    changed[digit] = b'2';
    std::fs::write(&path, &changed).unwrap();
    assert!(
        matches!(Store::open(&path), Err(StoreError::Corrupt { line: 6, .. })),
        "a changed digit was read"
    );
    let rep = compact::repair(&path).unwrap();
    assert_eq!((rep.kept, rep.dropped.len()), (9, 1));
    assert_eq!(rep.dropped[0].task, Some(5));
    // The damaged record's commit number is the gap it leaves.
    assert_eq!(rep.missing, vec![(5, 5)]);
    let (_, r) = Store::open(&path).unwrap();
    assert_eq!(
        unfinished(&r),
        vec![6],
        "task 5 dropped, named by the repair"
    );
}

/// Bytes from a small generator (no extra crate for a test's noise).
fn noise(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

#[test]
fn garbage_appended_is_cut_off_and_the_repair_takes_any_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let (path, bytes) = written(dir.path());
    let counter = std::fs::read(commit::counter_path(&path)).unwrap();
    for seed in 0..20 {
        let mut junk = bytes.clone();
        junk.extend(noise(seed, 300));
        std::fs::write(&path, &junk).unwrap();
        std::fs::write(commit::counter_path(&path), &counter).unwrap();
        // The counter says every record is there: what follows was never committed.
        let (mut s, r) = Store::open(&path).unwrap();
        assert_eq!(unfinished(&r), vec![5, 6], "seed {seed}");
        s.accepted(&task(7), &spec("job-7")).unwrap();
        drop(s);
        let (_, r) = Store::open(&path).unwrap();
        assert_eq!(
            unfinished(&r),
            vec![5, 6, 7],
            "seed {seed}: appended after the cut"
        );
    }
    // The repair on bytes that are no journal at all, and on a journal with noise in the middle.
    for seed in 0..50 {
        let dir2 = tempfile::tempdir().unwrap();
        let p2 = dir2.path().join("tasks.journal");
        let mut b = if seed % 2 == 0 {
            noise(seed, 2000)
        } else {
            bytes.clone()
        };
        if seed % 2 == 1 {
            let at = (seed as usize * 37) % b.len();
            b.splice(at..at, noise(seed, 64));
        }
        std::fs::write(&p2, &b).unwrap();
        let rep = compact::repair(&p2).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        if seed % 2 == 1 {
            assert!(rep.kept >= 8, "seed {seed}: {rep:?}");
        }
        Store::open(&p2).unwrap_or_else(|e| panic!("seed {seed}: repaired but refused: {e}"));
    }
}

#[test]
fn a_journal_from_before_checksums_is_migrated_once_with_its_counter() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tasks.journal");
    let mut v1 = String::new();
    for id in 1..=3 {
        let r = Record::Accepted {
            task: Box::new(task(id)),
            spec: Box::new(spec(&format!("old-{id}"))),
        };
        v1.push_str(&serde_json::to_string(&r).unwrap());
        v1.push('\n');
    }
    v1.push_str(
        &serde_json::to_string(&Record::Outcome {
            task: TaskId(1),
            node: NodeId(1),
            code: Some(0),
            epoch: 1,
        })
        .unwrap(),
    );
    v1.push('\n');
    std::fs::write(&path, &v1).unwrap();
    let (_, r) = Store::open(&path).unwrap();
    assert_eq!(unfinished(&r), vec![2, 3]);
    assert!(std::fs::read(&path).unwrap().starts_with(frame::HEADER));
    let c = commit::read(&commit::counter_path(&path)).unwrap().unwrap();
    assert!(c.seq > 0 && c.last_id == 3, "{c:?}");
    // From now on it is a journal like any: cut short, it is a loss.
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() - 10]).unwrap();
    expect_lost(&path, "a migrated journal cut short");
    // A damaged old journal is refused before migration, and the repair reads the old format.
    std::fs::write(commit::counter_path(&path), b"").unwrap();
    std::fs::write(&path, format!("{v1}{{\"accepted\": garbage\n{v1}")).unwrap();
    assert!(matches!(
        Store::open(&path),
        Err(StoreError::Corrupt { line: 5, .. })
    ));
    let rep = compact::repair(&path).unwrap();
    assert_eq!((rep.kept, rep.dropped.len()), (8, 1));
    let (_, r) = Store::open(&path).unwrap();
    assert_eq!(unfinished(&r), vec![2, 3]);
}

/// Two records swapped, or one repeated: refused, and the message says which commit came after
/// which, not a range that runs backwards.
#[test]
fn swapped_or_repeated_records_are_named_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let (path, bytes) = written(dir.path());
    let text = String::from_utf8(bytes).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let n = lines.len();
    for (what, changed) in [
        ("swapped", {
            let mut l = lines.clone();
            l.swap(n - 3, n - 2);
            l
        }),
        ("repeated", {
            let mut l = lines.clone();
            l.insert(n - 1, lines[n - 3]);
            l
        }),
    ] {
        std::fs::write(&path, changed.join("\n") + "\n").unwrap();
        let msg = match Store::open(&path) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("{what}: opened"),
        };
        assert!(msg.contains("comes after commit"), "{what}: {msg}");
        for (a, b) in msg
            .split("commits ")
            .skip(1)
            .filter_map(|s| s.split_once(".."))
            .filter_map(|(a, rest)| {
                Some((
                    a.parse::<u64>().ok()?,
                    rest.split(' ').next()?.parse::<u64>().ok()?,
                ))
            })
        {
            assert!(a <= b, "{what}: a range runs backwards: {msg}");
        }
    }
}

/// A counter deleted or turned to garbage beside a journal of records: refused (the protection
/// is not silently switched off), and the repair writes a new one.
#[test]
fn a_missing_or_unreadable_counter_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = written(dir.path());
    let counter = commit::counter_path(&path);
    for (what, damage) in [
        ("missing", None),
        (
            "unreadable",
            Some(b"not a counter at all, 48 bytes of garbage here!!".to_vec()),
        ),
    ] {
        match &damage {
            None => std::fs::remove_file(&counter).unwrap(),
            Some(b) => std::fs::write(&counter, b).unwrap(),
        }
        let msg = match Store::open(&path) {
            Err(e @ StoreError::Counter { .. }) => e.to_string(),
            other => panic!("{what}: {:?}", other.map(|_| ())),
        };
        assert!(
            msg.contains(what) && msg.contains("repair-journal") && msg.contains(" record(s)"),
            "{msg}"
        );
        compact::repair(&path).unwrap();
        let (_, r) = Store::open(&path).unwrap();
        assert_eq!(unfinished(&r), vec![5, 6], "{what}");
    }
}

/// Journal and counter both gone from a directory that held work: refused naming what shows
/// it; a new directory (or one that holds nothing of an agent's) opens empty.
#[test]
fn journal_and_counter_both_gone_from_a_used_directory_is_a_loss() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = written(dir.path());
    std::fs::write(dir.path().join("members.json"), b"[]").unwrap();
    std::fs::create_dir_all(dir.path().join("runs")).unwrap();
    std::fs::write(dir.path().join("runs/4.exit"), b"{}").unwrap();
    std::fs::remove_file(&path).unwrap();
    std::fs::remove_file(commit::counter_path(&path)).unwrap();
    let msg = match Store::open(&path) {
        Err(e @ StoreError::Vanished { .. }) => e.to_string(),
        other => panic!("{:?}", other.map(|_| ())),
    };
    assert!(
        msg.contains("members.json") && msg.contains("1 task record(s) in runs/"),
        "{msg}"
    );
    // Nothing was created meanwhile: the refusal changes nothing.
    assert!(!path.exists() && !commit::counter_path(&path).exists());
    compact::repair(&path).unwrap();
    let (_, r) = Store::open(&path).unwrap();
    assert!(r.accepted.is_empty());
    // A directory that never held an agent's work opens as a new box's, its identity key put
    // in place beforehand included.
    let fresh = tempfile::tempdir().unwrap();
    std::fs::write(fresh.path().join("notes.txt"), b"x").unwrap();
    std::fs::write(fresh.path().join("identity.key"), b"k").unwrap();
    let (_, r) = Store::open(&fresh.path().join("tasks.journal")).unwrap();
    assert!(r.accepted.is_empty());
}
