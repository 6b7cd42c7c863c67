//! Unit tests of `quality --strategies`' rules: the token goal holds only when tiered spends
//! the factor fewer in every case, and never on no case.

use super::{Goal, ratio_goal};

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
