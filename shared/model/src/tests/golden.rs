//! Golden text cases of the action masks (`tests/testdata/masks`, in the core's golden format:
//! `shared/core/tests/golden.rs`), as [`TapfingerPolicy::blocked`] and
//! [`TapfingerPolicy::pass_blocked`] give them in training and deployment alike. Arguments:
//! `me=N` (the deciding node), `window=W`, and the configuration's flags `elastic`,
//! `exclusive` (exclusive-first), `strict` (the strict work-conserving form) and `nomask` (the
//! work-conserving mask off). Input: the core's `node` and `task` lines. Output: the window,
//! its masked tasks, and whether passing is masked. `REWRITE=1 cargo nextest run -p
//! tapfinger-model golden` rewrites the outputs.

use super::*;
use burn::tensor::Device;
use std::fmt::Write;
use tapfinger_core::ledger::Priorities;

#[path = "../../../core/tests/support/text.rs"]
mod text;

fn run_masks(case: &datadriven::TestCase) -> String {
    let arg = |k: &str| case.args.get(k).and_then(|v| v.first()).map(String::as_str);
    let flag = |k: &str| case.args.contains_key(k);
    let window: usize = arg("window").unwrap_or("4").parse().unwrap();
    let me = text::node(arg("me").unwrap_or("0"));
    let ledger = text::ledger(&case.input, window, Priorities::default());
    let view = ledger.view(0, 0, 2, None);
    let mut cfg = NetConfig::new(Dims::per_preset(2, 2, window));
    cfg.elastic = flag("elastic");
    cfg.exclusive_first = flag("exclusive");
    cfg.strict_conserving = flag("strict");
    cfg.work_conserving = !flag("nomask");
    let policy = TapfingerPolicy::untrained(cfg, Device::flex());
    let v = view.for_agent(me).unwrap();
    let tasks: Vec<&Task> = v.window().take(window).collect();
    let blocked = policy.blocked(&v, &tasks);
    let pass = policy.pass_blocked(&v, &tasks, &blocked);
    let ids = |keep: &dyn Fn(usize) -> bool| {
        tasks
            .iter()
            .enumerate()
            .filter(|(i, _)| keep(*i))
            .map(|(_, t)| format!("t{}", t.id.0))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut s = String::new();
    writeln!(s, "window [{}]", ids(&|_| true)).unwrap();
    writeln!(s, "masked [{}]", ids(&|i| blocked[i])).unwrap();
    writeln!(s, "pass masked {pass}").unwrap();
    s
}

#[test]
fn golden_masks() {
    datadriven::walk("tests/testdata", |f| {
        f.run(|case| -> String {
            match case.directive.as_str() {
                "masks" => run_masks(case),
                other => panic!("unknown directive {other}"),
            }
        })
    });
}
