//! `tapfinger-agent gang-launch -- COMMAND...`: the members of a gang on one box, as the agent
//! starts them (one task process per box, under the supervisor like any task).
//!
//! It reads the ranks of this box's members from `TAPFINGER_GANG_RANKS` (set by the agent with
//! the rest of the rendezvous: `MASTER_ADDR`, `MASTER_PORT`, `WORLD_SIZE`, `TAPFINGER_GANG_PS`,
//! `TAPFINGER_PS_HOSTS`, `TAPFINGER_WORKER_HOSTS`) and runs `COMMAND` once per rank with `RANK`,
//! `LOCAL_RANK` and `TAPFINGER_GANG_ROLE` (`ps`, `worker`, or a pipeline's `stage`) added, the way `torchrun` runs
//! one node's processes. The members stay in the launcher's process group, which the
//! supervisor ends as a whole when the task is stopped. The launcher exits 0 when every member
//! has, and otherwise with the first failure's code (1 for a signal) after ending the others:
//! a gang with a failed member cannot go on. On SIGTERM it ends the members and exits 143.

use std::time::Duration;
use tokio::process::{Child, Command};

/// Run the members; returns the launcher's exit code.
pub async fn run(command: &[String]) -> i32 {
    let Some(program) = command.first() else {
        eprintln!("tapfinger gang-launch: no command");
        return 2;
    };
    let ranks: Vec<u32> = match std::env::var("TAPFINGER_GANG_RANKS") {
        Ok(v) => match v.split(',').map(str::parse).collect() {
            Ok(r) => r,
            Err(e) => {
                eprintln!("tapfinger gang-launch: TAPFINGER_GANG_RANKS={v:?}: {e}");
                return 2;
            }
        },
        Err(_) => {
            eprintln!("tapfinger gang-launch: TAPFINGER_GANG_RANKS is not set");
            return 2;
        }
    };
    let ps: u32 = std::env::var("TAPFINGER_GANG_PS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let mut members: Vec<(u32, Child)> = Vec::with_capacity(ranks.len());
    for (local, rank) in ranks.iter().enumerate() {
        // A pipeline has no PS: its members are its stages.
        let role = if ps == 0 {
            "stage"
        } else if *rank < ps {
            "ps"
        } else {
            "worker"
        };
        match Command::new(program)
            .args(&command[1..])
            .env("RANK", rank.to_string())
            .env("LOCAL_RANK", local.to_string())
            .env("TAPFINGER_GANG_ROLE", role)
            .stdin(std::process::Stdio::null())
            .spawn()
        {
            Ok(c) => members.push((*rank, c)),
            Err(e) => {
                eprintln!("tapfinger gang-launch: rank {rank}: {program}: {e}");
                end(&mut members).await;
                return 127;
            }
        }
    }
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("tapfinger gang-launch: cannot handle SIGTERM: {e}");
            end(&mut members).await;
            return 1;
        }
    };
    let mut poll = tokio::time::interval(Duration::from_millis(50));
    loop {
        tokio::select! {
            _ = term.recv() => {
                end(&mut members).await;
                return 143;
            }
            _ = poll.tick() => {}
        }
        let mut failed = None;
        members.retain_mut(|(rank, c)| match c.try_wait() {
            Ok(Some(status)) if status.success() => false,
            Ok(Some(status)) => {
                eprintln!("tapfinger gang-launch: rank {rank} ended with {status}");
                failed.get_or_insert(status.code().unwrap_or(1));
                false
            }
            Ok(None) => true,
            Err(e) => {
                eprintln!("tapfinger gang-launch: rank {rank}: {e}");
                failed.get_or_insert(1);
                false
            }
        });
        if let Some(code) = failed {
            end(&mut members).await;
            return if code == 0 { 1 } else { code };
        }
        if members.is_empty() {
            return 0;
        }
    }
}

/// End the members still running (SIGKILL) and reap them.
async fn end(members: &mut Vec<(u32, Child)>) {
    for (_, c) in members.iter_mut() {
        let _ = c.kill().await;
    }
    members.clear();
}
