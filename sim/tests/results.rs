//! The published figures still hold: the `hetero6` table of `docs/RESULTS.md` (written by
//! `scripts/results.sh`) against what `tapfinger-sim compare --scenario hetero6` gives now, every
//! policy's average JCT and its spread to the two decimals printed. A change that moves a figure
//! fails here until the tables are regenerated, so a published figure is never one the code no
//! longer gives. Deterministic (seeded workloads, greedy decisions): not a timing.

// Test code may unwrap: a failure there is a test failure with its message.
#![allow(clippy::unwrap_used)]

mod common;

use common::sim;

/// The rows of the table under `### {preset}`: (policy, "avg ± std").
fn published(doc: &str, preset: &str) -> Vec<(String, String)> {
    let heading = format!("### {preset}\n");
    let at = doc
        .find(&heading)
        .unwrap_or_else(|| panic!("docs/RESULTS.md has no table for {preset}"));
    doc[at + heading.len()..]
        .lines()
        .skip_while(|l| !l.starts_with("| policy"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            (
                cells[1].trim_end_matches('*').to_string(),
                cells[2].to_string(),
            )
        })
        .collect()
}

#[test]
fn the_published_hetero6_table_is_what_the_code_gives() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/RESULTS.md"))
        .unwrap();
    let rows = published(&doc, "hetero6");
    assert!(rows.len() >= 5, "the hetero6 table has {} rows", rows.len());
    let (ok, out, err) = sim(&["compare", "--scenario", "hetero6", "--json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let now: Vec<(String, String)> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["policy"].as_str().unwrap().to_string(),
                format!(
                    "{:.2} ± {:.2}",
                    r["avg_jct"].as_f64().unwrap(),
                    r["avg_jct_std"].as_f64().unwrap_or(0.0)
                ),
            )
        })
        .collect();
    assert_eq!(
        rows, now,
        "docs/RESULTS.md's hetero6 table is stale: run scripts/results.sh"
    );
}
