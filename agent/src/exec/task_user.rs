//! The user tasks run as (`task_user`), apart from the agent's: a task then cannot read the
//! agent's identity key, journal or other tasks' logs (each private to the agent's user), nor
//! write anywhere in its data directory, so it cannot plant a link where the agent writes nor
//! change another task's share file. The switch happens last, after the task has joined its
//! cgroup (which only the agent's user may write): `setpriv` (util-linux) sets the user, its
//! group and no supplementary groups, and clears the ambient and inheritable capabilities, so
//! the task's program starts with none.
//!
//! It needs an agent that may change users: root, or one holding `CAP_SETUID` and `CAP_SETGID`
//! (the packaged unit grants both, with `tapfinger-task` made by its sysusers file).

/// The user tasks run as, resolved at start.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskUser {
    /// Its name.
    pub name: String,
    /// Its user id.
    pub uid: u32,
    /// Its primary group id.
    pub gid: u32,
}

/// Capability bits (`capability.h`) the switch needs.
const CAP_SETGID: u32 = 6;
const CAP_SETUID: u32 = 7;

impl TaskUser {
    /// Resolve `name` and check that this agent can start tasks as it: the user exists, is
    /// not the agent's own, `setpriv` is installed, and the agent is root or holds
    /// `CAP_SETUID` and `CAP_SETGID`.
    pub fn resolve(name: &str) -> Result<Self, String> {
        let user = nix::unistd::User::from_name(name)
            .map_err(|e| format!("task_user: cannot look up {name:?}: {e}"))?
            .ok_or_else(|| format!("task_user: there is no user {name:?} on this box"))?;
        let me = nix::unistd::geteuid();
        if user.uid == me {
            return Err(format!(
                "task_user: {name:?} is the agent's own user: tasks would read its keys"
            ));
        }
        if !crate::procs::installed("setpriv") {
            return Err("task_user: setpriv (util-linux) is not installed".into());
        }
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let effective = crate::procs::cap_field(&status, "CapEff:").unwrap_or(0);
        let can = |bit: u32| effective & (1 << bit) != 0;
        let may_switch = me.is_root() || (can(CAP_SETUID) && can(CAP_SETGID));
        if !may_switch {
            return Err(format!(
                "task_user: the agent runs as uid {me} without CAP_SETUID and CAP_SETGID, so it \
                 cannot start tasks as {name:?} (the packaged unit grants both)"
            ));
        }
        Ok(Self {
            name: name.to_string(),
            uid: user.uid.as_raw(),
            gid: user.gid.as_raw(),
        })
    }

    /// What the task's command is run through: the switch to this user, with no capability
    /// left to pass on.
    pub fn setpriv(&self) -> Vec<String> {
        vec![
            "setpriv".into(),
            format!("--reuid={}", self.uid),
            format!("--regid={}", self.gid),
            "--clear-groups".into(),
            "--inh-caps=-all".into(),
            "--ambient-caps=-all".into(),
            "--".into(),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_user_is_named_and_the_switch_drops_everything() {
        let e = TaskUser::resolve("no-such-user-tapfinger").unwrap_err();
        assert!(e.contains("no user \"no-such-user-tapfinger\""), "{e}");
        let u = TaskUser {
            name: "t".into(),
            uid: 990,
            gid: 991,
        };
        assert_eq!(
            u.setpriv().join(" "),
            "setpriv --reuid=990 --regid=991 --clear-groups --inh-caps=-all --ambient-caps=-all --"
        );
        assert_eq!(
            crate::procs::cap_field("CapEff:\t00000000000000c0\n", "CapEff:"),
            Some(0xc0)
        );
    }
}
