//! `tapfinger-agent demo-gang`: a small multi-process job that really rendezvouses, for trying
//! gangs (and for the tests that judge them).
//!
//! Each member reads the rendezvous the agent gives it (`MASTER_ADDR`, `MASTER_PORT`,
//! `WORLD_SIZE`, `RANK`). Rank 0 listens on `MASTER_PORT`; every other rank connects to
//! `MASTER_ADDR:MASTER_PORT` and sends its rank. Once all have, rank 0 sends each the sum of
//! all ranks; the members then stay connected for `--hold` seconds (a job's training), and rank
//! 0 ends it with `bye`. A member whose partner goes away, or that does not meet all of them
//! within `--timeout` seconds, exits 3: a gang missing a member cannot go on. With `--out DIR`
//! each member writes what it did there, as evidence the agents cannot fake: `<task>-<epoch>-
//! <rank>.start` (its pid and box, at start) and `.done` (the sum it agreed on, at the end).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Arguments of `demo-gang`.
#[derive(Debug, Clone, clap::Args)]
pub struct DemoGangArgs {
    /// Seconds the members stay connected after the exchange.
    #[arg(long, default_value_t = 2.0)]
    pub hold: f64,
    /// Seconds to meet every member.
    #[arg(long, default_value_t = 60.0)]
    pub timeout: f64,
    /// Folder for the members' records.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

fn var(name: &str) -> Result<String, String> {
    std::env::var(name).map_err(|_| format!("{name} is not set (run me as a gang member)"))
}

fn number<T: std::str::FromStr>(name: &str) -> Result<T, String> {
    var(name)?
        .parse()
        .map_err(|_| format!("{name} is not a number"))
}

/// Run one member; returns its exit code.
pub fn run(a: &DemoGangArgs) -> i32 {
    match member(a) {
        Ok(sum) => {
            println!("TAPFINGER progress=1.0 sum={sum}");
            0
        }
        Err(e) => {
            eprintln!("demo-gang: {e}");
            3
        }
    }
}

fn record(a: &DemoGangArgs, rank: u32, ext: &str, text: &str) -> Result<(), String> {
    let Some(dir) = &a.out else { return Ok(()) };
    let task = std::env::var("TAPFINGER_TASK_ID").unwrap_or_default();
    let epoch = std::env::var("TAPFINGER_EPOCH").unwrap_or_default();
    let name = format!("{task}-{epoch}-{rank}.{ext}");
    let path = dir.join(&name);
    // Written whole, then renamed into place: a reader polling the folder must never see the
    // record created but still empty (it did: a test read a `.start` with no pid in it). The
    // temporary name ends in `.tmp`, which no reader takes for a record.
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, text)
        .and_then(|()| std::fs::rename(&tmp, &path))
        .map_err(|e| format!("{}: {e}", path.display()))
}

fn member(a: &DemoGangArgs) -> Result<u64, String> {
    let rank: u32 = number("RANK")?;
    let world: u32 = number("WORLD_SIZE")?;
    let port: u16 = number("MASTER_PORT")?;
    let addr = var("MASTER_ADDR")?;
    let node = std::env::var("TAPFINGER_NODE").unwrap_or_default();
    record(
        a,
        rank,
        "start",
        &format!("{} {node}\n", std::process::id()),
    )?;
    let deadline = Instant::now() + Duration::from_secs_f64(a.timeout);
    let hold = Duration::from_secs_f64(a.hold);
    let sum = if rank == 0 {
        master(port, world, deadline, hold)?
    } else {
        worker(&addr, port, rank, deadline, hold)?
    };
    record(a, rank, "done", &format!("{sum}\n"))?;
    Ok(sum)
}

fn master(port: u16, world: u32, deadline: Instant, hold: Duration) -> Result<u64, String> {
    // A restarted gang's rank 0 listens on the same port as the copy before it, which may still
    // be exiting (on this box, or on the one box of a test): wait for the port, up to the
    // deadline, rather than fail the new copy too.
    let listener = loop {
        match TcpListener::bind(("0.0.0.0", port)) {
            Ok(l) => break l,
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => return Err(format!("listen on {port}: {e}")),
        }
    };
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    let mut peers: Vec<BufReader<TcpStream>> = Vec::new();
    let mut sum = 0u64;
    while peers.len() + 1 < world as usize {
        if Instant::now() > deadline {
            return Err(format!(
                "met {} of {world} members in time",
                peers.len() + 1
            ));
        }
        match listener.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false).map_err(|e| e.to_string())?;
                s.set_read_timeout(Some(Duration::from_secs(10)))
                    .map_err(|e| e.to_string())?;
                let mut r = BufReader::new(s);
                let mut line = String::new();
                r.read_line(&mut line).map_err(|e| e.to_string())?;
                sum += line
                    .trim()
                    .parse::<u64>()
                    .map_err(|_| format!("bad rank {line:?}"))?;
                peers.push(r);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(e.to_string()),
        }
    }
    for p in &mut peers {
        writeln!(p.get_mut(), "{sum}").map_err(|e| format!("send the sum: {e}"))?;
    }
    // Training: every member must stay; one that goes away ends the job.
    let end = Instant::now() + hold;
    while Instant::now() < end {
        for p in &mut peers {
            let s = p.get_mut();
            s.set_nonblocking(true).map_err(|e| e.to_string())?;
            let mut b = [0u8; 1];
            match s.read(&mut b) {
                Ok(0) => return Err("a member went away".into()),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Ok(_) => {}
                Err(e) => return Err(format!("a member went away: {e}")),
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    for p in &mut peers {
        let s = p.get_mut();
        s.set_nonblocking(false).map_err(|e| e.to_string())?;
        writeln!(s, "bye").map_err(|e| format!("send bye: {e}"))?;
    }
    Ok(sum)
}

fn worker(
    addr: &str,
    port: u16,
    rank: u32,
    deadline: Instant,
    hold: Duration,
) -> Result<u64, String> {
    let s = loop {
        match TcpStream::connect((addr, port)) {
            Ok(s) => break s,
            Err(e) if Instant::now() > deadline => {
                return Err(format!("cannot reach rank 0 at {addr}:{port}: {e}"));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    };
    let mut w = s.try_clone().map_err(|e| e.to_string())?;
    writeln!(w, "{rank}").map_err(|e| e.to_string())?;
    let wait = deadline.saturating_duration_since(Instant::now()) + hold + Duration::from_secs(10);
    s.set_read_timeout(Some(wait)).map_err(|e| e.to_string())?;
    let mut r = BufReader::new(s);
    let mut line = String::new();
    if r.read_line(&mut line).map_err(|e| e.to_string())? == 0 {
        return Err("rank 0 went away before the exchange".into());
    }
    let sum: u64 = line
        .trim()
        .parse()
        .map_err(|_| format!("bad sum {line:?}"))?;
    line.clear();
    match r.read_line(&mut line) {
        Ok(n) if n > 0 && line.trim() == "bye" => Ok(sum),
        Ok(_) => Err("rank 0 went away".into()),
        Err(e) => Err(format!("rank 0 went away: {e}")),
    }
}
