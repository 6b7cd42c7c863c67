//! The module check: no circle of `use` between the modules of one crate.
//!
//! Each crate of the repository (a library, a binary, an integration-test binary, an example) is
//! read from its root file along its `mod` declarations, inline modules included. Every path a
//! module names that starts with `crate`, `super` or `self` (in a `use` or in code) points to
//! the module it reaches, following a name re-exported by a `use` of the module it names (so
//! `crate::Ledger` reaches the module `lib.rs` took `Ledger` from).
//!
//! The rule is read folder by folder: the modules directly inside one module (each counted with
//! everything nested in it) must not reach each other in a circle. A module reaching its own
//! parent or child is not a circle: a folder's `mod.rs` holds the concept's type and its
//! submodules the jobs around it, which use that type (ripgrep's `searcher/{mod,core,glue}.rs`).
//! Modules compiled only for tests (`#[cfg(test)]`) are left out: nothing else uses them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::path::{Path, PathBuf};

use super::lex::{Tok, Token, tokens};

/// One module of a crate.
#[derive(Debug)]
struct Module {
    /// Its path from the crate root (empty for the root).
    path: Vec<String>,
    /// The file it is written in.
    file: PathBuf,
    /// Whether it, or a module around it, is compiled only for tests.
    test: bool,
}

/// A path a module names, as read.
#[derive(Debug)]
struct Named {
    /// The module that names it.
    from: usize,
    /// Its segments, `crate`, `super` or `self` first (or a child module's name, in a `use`).
    segments: Vec<String>,
    /// The name a `use` binds it to, if it is a `use`.
    binding: Option<String>,
    line: usize,
}

/// The modules of one crate and the paths they name.
#[derive(Debug, Default)]
struct Crate {
    modules: Vec<Module>,
    named: Vec<Named>,
}

/// One module reaching another, with where it says so.
#[derive(Clone, Debug)]
struct Edge {
    from: usize,
    to: usize,
    file: PathBuf,
    line: usize,
    text: String,
}

/// The root files of the crates of the package in `dir`: its library, binaries, integration
/// tests, examples and benches.
pub(crate) fn crate_roots(dir: &Path) -> Vec<PathBuf> {
    let mut roots = Vec::new();
    for file in ["src/lib.rs", "src/main.rs"] {
        if dir.join(file).is_file() {
            roots.push(dir.join(file));
        }
    }
    for folder in ["src/bin", "tests", "examples", "benches"] {
        let Ok(entries) = fs::read_dir(dir.join(folder)) else {
            continue;
        };
        let mut found: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter_map(|p| {
                if p.extension().is_some_and(|e| e == "rs") {
                    Some(p)
                } else if p.join("main.rs").is_file() {
                    Some(p.join("main.rs"))
                } else {
                    None
                }
            })
            .collect();
        found.sort();
        roots.extend(found);
    }
    roots
}

/// The circles of the crate whose root file is `root`, one sentence each (paths shown relative
/// to `base`).
pub(crate) fn circles(root: &Path, base: &Path) -> Vec<String> {
    let krate = read_crate(root);
    let edges = resolve(&krate);
    let mut problems = Vec::new();
    // Edges between the children of each module, each child standing for its subtree.
    let mut levels: BTreeMap<Vec<String>, BTreeMap<(String, String), Edge>> = BTreeMap::new();
    for edge in edges {
        let (from, to) = (&krate.modules[edge.from], &krate.modules[edge.to]);
        if from.test || to.test {
            continue;
        }
        let common = from
            .path
            .iter()
            .zip(&to.path)
            .take_while(|(a, b)| a == b)
            .count();
        if common == from.path.len() || common == to.path.len() {
            // One contains the other: a parent and its child.
            continue;
        }
        let key = (from.path[common].clone(), to.path[common].clone());
        levels
            .entry(from.path[..common].to_vec())
            .or_default()
            .entry(key)
            .or_insert(edge);
    }
    for (parent, edges) in levels {
        for (group, cycle) in cycles(edges.keys()) {
            let steps: Vec<String> = cycle
                .windows(2)
                .map(|pair| {
                    let edge = &edges[&(pair[0].clone(), pair[1].clone())];
                    format!(
                        "`{}` uses `{}` ({}:{}: `{}`)",
                        pair[0],
                        pair[1],
                        rel(base, &edge.file),
                        edge.line,
                        edge.text
                    )
                })
                .collect();
            let place = if parent.is_empty() {
                String::new()
            } else {
                format!(" inside `{}`", parent.join("::"))
            };
            let mut names: Vec<String> = group.iter().map(|n| format!("`{n}`")).collect();
            let last = names.pop().unwrap_or_default();
            problems.push(format!(
                "{}: the modules {} and {last}{place} use each other in a circle, for one: {}",
                rel(base, root),
                names.join(", "),
                steps.join(", ")
            ));
        }
    }
    problems
}

/// Each group of modules that reach each other (more than one), with one circle through it as
/// names, the first repeated last.
fn cycles<'a>(
    edges: impl Iterator<Item = &'a (String, String)>,
) -> Vec<(Vec<String>, Vec<String>)> {
    let mut graph: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (a, b) in edges {
        graph.entry(a).or_default().insert(b);
        graph.entry(b).or_default();
    }
    let reach = |from: &str| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.to_owned()];
        while let Some(n) = stack.pop() {
            for &m in &graph[n.as_str()] {
                if seen.insert(m.to_owned()) {
                    stack.push(m.to_owned());
                }
            }
        }
        seen
    };
    let reachable: BTreeMap<&str, BTreeSet<String>> =
        graph.keys().map(|&n| (n, reach(n))).collect();
    let mut done = BTreeSet::new();
    let mut out = Vec::new();
    for &start in graph.keys() {
        if done.contains(start) || !reachable[start].contains(start) {
            continue;
        }
        // The group: the modules that reach `start` and that `start` reaches.
        let group: BTreeSet<&str> = graph
            .keys()
            .copied()
            .filter(|&n| reachable[start].contains(n) && reachable[n].contains(start))
            .collect();
        done.extend(group.iter().copied());
        // A shortest way back to `start`, breadth first inside the group.
        let mut before: HashMap<&str, &str> = HashMap::new();
        let mut queue = std::collections::VecDeque::from([start]);
        'search: while let Some(n) = queue.pop_front() {
            for &m in &graph[n] {
                if !group.contains(m) {
                    continue;
                }
                if m == start {
                    before.insert(start, n);
                    break 'search;
                }
                if let std::collections::hash_map::Entry::Vacant(e) = before.entry(m) {
                    e.insert(n);
                    queue.push_back(m);
                }
            }
        }
        let mut cycle = vec![start.to_owned()];
        let mut at = before[start];
        while at != start {
            cycle.push(at.to_owned());
            at = before[at];
        }
        cycle.push(start.to_owned());
        cycle.reverse();
        out.push((group.iter().map(|&n| n.to_owned()).collect(), cycle));
    }
    out
}

/// Reads the crate rooted at `root` along its `mod` declarations.
fn read_crate(root: &Path) -> Crate {
    let mut krate = Crate::default();
    let mut pending = vec![(root.to_path_buf(), Vec::new(), false)];
    while let Some((file, path, test)) = pending.pop() {
        let Ok(source) = fs::read_to_string(&file) else {
            continue;
        };
        read_file(
            &mut krate,
            &file,
            path,
            test,
            &tokens(&source),
            &mut pending,
        );
    }
    krate
}

/// The folder in which the file modules declared by the module in `file` live.
fn child_dir(file: &Path, path: &[String]) -> PathBuf {
    let dir = file.parent().unwrap_or(Path::new("")).to_path_buf();
    let name = file.file_stem().unwrap_or_default().to_string_lossy();
    if path.is_empty() || name == "mod" {
        dir
    } else {
        dir.join(name.as_ref())
    }
}

/// Reads the modules of one file: the file's own and its inline ones.
fn read_file(
    krate: &mut Crate,
    file: &Path,
    path: Vec<String>,
    test: bool,
    toks: &[Token],
    pending: &mut Vec<(PathBuf, Vec<String>, bool)>,
) {
    let top = krate.modules.len();
    krate.modules.push(Module {
        path: path.clone(),
        file: file.to_path_buf(),
        test,
    });
    // The open inline modules: their index, the brace depth inside them, their folder.
    let mut stack: Vec<(usize, usize, PathBuf)> = vec![(top, 0, child_dir(file, &path))];
    let mut depth = 0usize;
    // Attributes seen since the last item: `cfg(test)`, `path = "..."`.
    let mut cfg_test = false;
    let mut path_attr: Option<String> = None;
    let mut i = 0;
    while i < toks.len() {
        let current = stack.last().map_or(top, |s| s.0);
        match &toks[i].tok {
            Tok::Punct('#') => {
                // An attribute: `#[...]` or `#![...]`.
                let mut j = i + 1;
                if toks.get(j).is_some_and(|t| t.tok == Tok::Punct('!')) {
                    j += 1;
                }
                if toks.get(j).is_some_and(|t| t.tok == Tok::Punct('[')) {
                    let end = matching(toks, j);
                    let inner = &toks[j + 1..end];
                    if is_cfg_test(inner) {
                        cfg_test = true;
                    }
                    if let [first, eq, value] = inner
                        && first.tok == Tok::Ident("path".into())
                        && eq.tok == Tok::Punct('=')
                        && let Tok::Str(s) = &value.tok
                    {
                        path_attr = Some(s.clone());
                    }
                    i = end + 1;
                    continue;
                }
                i += 1;
            }
            Tok::Ident(word) if word == "mod" => {
                let Some(Tok::Ident(name)) = toks.get(i + 1).map(|t| &t.tok) else {
                    i += 1;
                    continue;
                };
                let module = &krate.modules[current];
                let mut child_path = module.path.clone();
                child_path.push(name.clone());
                let child_test = module.test || cfg_test;
                let dir = stack.last().map(|s| s.2.clone()).unwrap_or_default();
                match toks.get(i + 2).map(|t| &t.tok) {
                    Some(Tok::Punct(';')) => {
                        let file = match path_attr.take() {
                            Some(p) => dir.join(p),
                            None if dir.join(format!("{name}.rs")).is_file() => {
                                dir.join(format!("{name}.rs"))
                            }
                            None => dir.join(name).join("mod.rs"),
                        };
                        pending.push((file, child_path, child_test));
                        i += 3;
                    }
                    Some(Tok::Punct('{')) => {
                        let index = krate.modules.len();
                        krate.modules.push(Module {
                            path: child_path,
                            file: file.to_path_buf(),
                            test: child_test,
                        });
                        depth += 1;
                        stack.push((index, depth, dir.join(name)));
                        i += 3;
                    }
                    _ => i += 2,
                }
                cfg_test = false;
                path_attr = None;
            }
            Tok::Ident(word) if word == "use" => {
                let end = (i..toks.len())
                    .find(|&j| toks[j].tok == Tok::Punct(';'))
                    .unwrap_or(toks.len());
                let mut leaves = Vec::new();
                use_tree(&toks[i + 1..end], &[], &mut leaves);
                for (segments, binding) in leaves {
                    krate.named.push(Named {
                        from: current,
                        segments,
                        binding,
                        line: toks[i].line,
                    });
                }
                i = end + 1;
                cfg_test = false;
                path_attr = None;
            }
            Tok::Ident(word)
                if matches!(word.as_str(), "crate" | "super" | "self")
                    && toks.get(i + 1).is_some_and(|t| t.tok == Tok::PathSep)
                    && !(i > 0 && toks[i - 1].tok == Tok::Punct('$'))
                    && !(i > 0 && toks[i - 1].tok == Tok::PathSep) =>
            {
                let mut segments = vec![word.clone()];
                let mut j = i + 1;
                while toks.get(j).is_some_and(|t| t.tok == Tok::PathSep) {
                    match toks.get(j + 1).map(|t| &t.tok) {
                        Some(Tok::Ident(s)) => segments.push(s.clone()),
                        _ => break,
                    }
                    j += 2;
                }
                krate.named.push(Named {
                    from: current,
                    segments,
                    binding: None,
                    line: toks[i].line,
                });
                i = j;
            }
            Tok::Punct('{') => {
                depth += 1;
                i += 1;
                cfg_test = false;
                path_attr = None;
            }
            Tok::Punct('}') => {
                if stack.len() > 1 && stack.last().is_some_and(|s| s.1 == depth) {
                    stack.pop();
                }
                depth = depth.saturating_sub(1);
                i += 1;
                cfg_test = false;
                path_attr = None;
            }
            Tok::Punct(';') => {
                i += 1;
                cfg_test = false;
                path_attr = None;
            }
            _ => i += 1,
        }
    }
}

/// Whether the inside of an attribute is `cfg(test)`.
fn is_cfg_test(inner: &[Token]) -> bool {
    let words: Vec<&Tok> = inner.iter().map(|t| &t.tok).collect();
    words
        == [
            &Tok::Ident("cfg".into()),
            &Tok::Punct('('),
            &Tok::Ident("test".into()),
            &Tok::Punct(')'),
        ]
}

/// The index of the bracket closing the one at `open`.
fn matching(toks: &[Token], open: usize) -> usize {
    let mut depth = 0;
    for (j, t) in toks.iter().enumerate().skip(open) {
        match t.tok {
            Tok::Punct('[' | '(' | '{') => depth += 1,
            Tok::Punct(']' | ')' | '}') => {
                depth -= 1;
                if depth == 0 {
                    return j;
                }
            }
            _ => {}
        }
    }
    toks.len().saturating_sub(1)
}

/// The leaves of a `use` tree (the tokens between `use` and `;`), each its full path and the
/// name it binds (`None` for a glob or `_`).
fn use_tree(toks: &[Token], prefix: &[String], out: &mut Vec<(Vec<String>, Option<String>)>) {
    // The tree's parts, split at its top-level commas.
    let mut parts = Vec::new();
    let mut start = 0;
    let mut depth = 0;
    for (j, t) in toks.iter().enumerate() {
        match t.tok {
            Tok::Punct('{') => depth += 1,
            Tok::Punct('}') => depth -= 1,
            Tok::Punct(',') if depth == 0 => {
                parts.push(&toks[start..j]);
                start = j + 1;
            }
            _ => {}
        }
    }
    parts.push(&toks[start..]);
    for part in parts {
        let mut segments = prefix.to_vec();
        let mut alias = None;
        let mut j = 0;
        while j < part.len() {
            match &part[j].tok {
                Tok::Ident(s) if s == "as" => {
                    if let Some(Tok::Ident(name)) = part.get(j + 1).map(|t| &t.tok) {
                        alias = Some(name.clone());
                    }
                    break;
                }
                Tok::Ident(s) => segments.push(s.clone()),
                Tok::Punct('*') => {
                    out.push((segments.clone(), None));
                    segments.truncate(prefix.len());
                    break;
                }
                Tok::Punct('{') => {
                    let end = matching(part, j);
                    use_tree(&part[j + 1..end], &segments, out);
                    segments.truncate(prefix.len());
                    break;
                }
                _ => {}
            }
            j += 1;
        }
        if segments.len() == prefix.len() {
            continue;
        }
        if segments.last().is_some_and(|s| s == "self") {
            segments.pop();
        }
        let binding = match alias {
            Some(name) if name == "_" => None,
            Some(name) => Some(name),
            None => segments.last().cloned(),
        };
        out.push((segments, binding));
    }
}

/// The edges of the crate: each named path to the module it reaches.
fn resolve(krate: &Crate) -> Vec<Edge> {
    let index: HashMap<&[String], usize> = krate
        .modules
        .iter()
        .enumerate()
        .map(|(i, m)| (m.path.as_slice(), i))
        .collect();
    // Where each module's `use` bindings point: (module, name) -> (module, rest of the path).
    let start = |n: &Named| -> Option<(usize, usize)> {
        let from = &krate.modules[n.from].path;
        let first = n.segments.first()?;
        let (mut base, mut k) = match first.as_str() {
            "crate" => (Vec::new(), 1),
            "self" => (from.clone(), 1),
            "super" => (from.clone(), 0),
            _ => {
                // A `use` may start at a child module of its own (uniform paths).
                let mut child = from.clone();
                child.push(first.clone());
                if n.binding.is_some() && index.contains_key(child.as_slice()) {
                    (from.clone(), 0)
                } else {
                    return None;
                }
            }
        };
        while n.segments.get(k).is_some_and(|s| s == "super") {
            base.pop()?;
            k += 1;
        }
        Some((index[base.as_slice()], k))
    };
    let mut bindings: HashMap<(usize, &str), (usize, Vec<String>)> = HashMap::new();
    for n in &krate.named {
        if let (Some(binding), Some((base, k))) = (&n.binding, start(n)) {
            let (module, rest) = descend(krate, &index, base, &n.segments[k..]);
            bindings.insert((n.from, binding.as_str()), (module, rest));
        }
    }
    let mut edges = Vec::new();
    for n in &krate.named {
        let Some((base, k)) = start(n) else {
            continue;
        };
        let (mut module, mut rest) = descend(krate, &index, base, &n.segments[k..]);
        // Follow re-exports: a name the reached module took from elsewhere with a `use`.
        for _ in 0..8 {
            let Some(name) = rest.first() else { break };
            let Some((next, more)) = bindings.get(&(module, name.as_str())) else {
                break;
            };
            if *next == n.from {
                break;
            }
            let mut path = krate.modules[*next].path.clone();
            path.extend(more.iter().cloned());
            path.extend(rest.iter().skip(1).cloned());
            // The root is the first module read.
            let (m, r) = descend(krate, &index, 0, &path);
            module = m;
            rest = r;
        }
        edges.push(Edge {
            from: n.from,
            to: module,
            file: krate.modules[n.from].file.clone(),
            line: n.line,
            text: n.segments.join("::"),
        });
    }
    edges
}

/// The deepest module reached from `base` by `segments`, and the segments left after it.
fn descend(
    krate: &Crate,
    index: &HashMap<&[String], usize>,
    base: usize,
    segments: &[String],
) -> (usize, Vec<String>) {
    let mut path = krate.modules[base].path.clone();
    let mut module = base;
    for (k, s) in segments.iter().enumerate() {
        path.push(s.clone());
        match index.get(path.as_slice()) {
            Some(&m) => module = m,
            None => return (module, segments[k..].to_vec()),
        }
    }
    (module, Vec::new())
}

fn rel(base: &Path, p: &Path) -> String {
    p.strip_prefix(base).unwrap_or(p).display().to_string()
}
