//! How the daemon starts a box's members of a gang: one task process, the agent's own
//! `gang-launch`, which runs the members' command once per rank with the rendezvous.

use tapfinger::TaskId;
use tapfinger::node::gangs::GangStart;
use tapfinger::spec::TaskSpec;

/// Make `spec` start the members of `g` on this box: the rendezvous goes in the environment,
/// and the command runs under one launcher, which gives each member its `RANK` and `LOCAL_RANK`
/// and ends them all when one fails (`tapfinger-agent gang-launch`).
pub(super) fn wrap(task: TaskId, spec: &mut TaskSpec, g: &GangStart) {
    spec.env.extend(g.env());
    match std::env::current_exe() {
        Ok(exe) => {
            let mut command = vec![exe.display().to_string(), "gang-launch".into(), "--".into()];
            command.append(&mut spec.command);
            spec.command = command;
        }
        Err(e) => {
            tracing::warn!(%task, error = %e, "cannot find the agent's own binary to launch a gang")
        }
    }
}
