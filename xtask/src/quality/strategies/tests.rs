//! Unit tests of `quality --strategies`' rules: the token goal holds only when tiered spends
//! the factor fewer in every case, and never on no case; a pressure run keeps its compaction
//! requests, and only those.

use super::load::keep_requests;
use super::{Goal, ratio_goal};
use crate::quality::loopback::Seen;

#[test]
fn the_token_goal_needs_the_factor_in_every_case() {
    let case = |s: f64, t: f64| ("s".to_owned(), s, t);
    let holds = |ratios: &[(String, f64, f64)]| ratio_goal(Goal::FewerTokens, ratios).1;
    assert!(holds(&[case(5000.0, 1000.0), case(100.0, 0.0)]));
    assert!(!holds(&[case(5000.0, 1000.0), case(4999.0, 1000.0)]));
    assert!(!holds(&[]), "no tool-heavy case proves nothing");
    let (_, _, detail) = ratio_goal(Goal::FewerTokens, &[case(17_217.0, 1852.0)]);
    assert_eq!(detail, "s: summary 17217, tiered 1852");
}

#[test]
fn a_pressure_run_keeps_its_compaction_requests_and_only_those() {
    let dir = std::env::temp_dir().join(format!("panto-keep-requests-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let seen = |compaction: bool, input: u64, fitted: bool| Seen {
        compaction,
        input,
        max_output: 444,
        fitted,
        messages: format!("[{{\"role\":\"user\",\"content\":\"{input}\"}}]"),
        output: if fitted { 107 } else { 0 },
    };
    keep_requests(&dir, 1, &[seen(false, 9000, false), seen(true, 3127, true)]).unwrap();
    keep_requests(&dir, 2, &[seen(true, 1387, true), seen(false, 800, true)]).unwrap();
    let text = std::fs::read_to_string(dir.join("compaction-requests.jsonl")).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let kept: Vec<(u64, u64, u64)> = lines
        .iter()
        .map(|l| {
            let n = |k: &str| l[k].as_u64().unwrap();
            (n("send"), n("input"), n("output"))
        })
        .collect();
    assert_eq!(kept, [(1, 3127, 107), (2, 1387, 107)]);
    assert_eq!(
        lines[1]["messages"],
        r#"[{"role":"user","content":"1387"}]"#
    );
    assert_eq!(lines[0]["fitted"], true);
    let _ = std::fs::remove_dir_all(&dir);
}
