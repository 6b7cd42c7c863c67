//! Unit tests: the retention plan on literal conversations, the budget cap, prompt layering and
//! ids.
