//! The crates' layering, read from their Cargo.toml files: no crate depends on one above it,
//! and nothing forms a circle. From the ground:
//!
//! 1. `reference`, `course`
//! 2. `gpu`, `testkit`
//! 3. `bench`
//! 4. the lessons, each on earlier lessons only
//! 5. `registry`, which lists them
//! 6. the exercises
//! 7. `grader`, `tour`, `lab`, `tests`, `diagrams`
//!
//! One dependency runs up, by design: an exercise's `hidden` test target is the grader's code
//! for it (`grader/src/exNN/hidden.rs`), so each exercise dev-depends on the grader.

use std::collections::BTreeMap;

use tests::root;

/// A workspace package's place: its layer, and for a lesson or an exercise its number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Place {
    layer: u8,
    number: u8,
}

/// Where `package` stands, or `None` for a package the layering does not know (which the
/// test refuses, so that a new crate must be given its place).
fn place(package: &str) -> Option<Place> {
    let numbered = |prefix: &str| package.strip_prefix(prefix).and_then(|n| n.parse().ok());
    let layer = |layer| Some(Place { layer, number: 0 });
    match package {
        "reference" | "course" => layer(1),
        "gpu" | "testkit" => layer(2),
        "bench" => layer(3),
        "registry" => layer(5),
        "grader" | "tour" | "lab" | "tests" | "diagrams" => layer(7),
        _ => {
            if let Some(number) = numbered("lesson") {
                Some(Place { layer: 4, number })
            } else {
                numbered("ex").map(|number| Place { layer: 6, number })
            }
        }
    }
}

/// Whether `from` may depend on `to`: a lower layer, or an earlier lesson.
fn may_depend(from: Place, to: Place) -> bool {
    to.layer < from.layer || (to.layer == from.layer && from.layer == 4 && to.number < from.number)
}

/// Every workspace member's package name and the workspace packages it depends on (normal,
/// dev and build dependencies), with the kind of each.
fn workspace_dependencies() -> BTreeMap<String, Vec<(String, &'static str)>> {
    let read = |relative: &str| -> toml::Table {
        let text = std::fs::read_to_string(root().join(relative))
            .unwrap_or_else(|e| panic!("{relative}: {e}"));
        text.parse().unwrap_or_else(|e| panic!("{relative}: {e}"))
    };
    let mut graph = BTreeMap::new();
    let names: Vec<(String, toml::Table)> = tests::members()
        .iter()
        .map(|m| {
            let manifest = read(&format!("{m}/Cargo.toml"));
            let name = manifest["package"]["name"].as_str().expect("a name").to_string();
            (name, manifest)
        })
        .collect();
    let in_workspace: Vec<&str> = names.iter().map(|(name, _)| name.as_str()).collect();
    for (name, manifest) in &names {
        let mut edges = Vec::new();
        for kind in ["dependencies", "dev-dependencies", "build-dependencies"] {
            let Some(table) = manifest.get(kind).and_then(|t| t.as_table()) else { continue };
            for dependency in table.keys() {
                if in_workspace.contains(&dependency.as_str()) {
                    edges.push((dependency.clone(), kind));
                }
            }
        }
        graph.insert(name.clone(), edges);
    }
    graph
}

#[test]
fn no_crate_depends_on_one_above_it() {
    let mut wrong = Vec::new();
    for (package, dependencies) in workspace_dependencies() {
        let from =
            place(&package).unwrap_or_else(|| panic!("{package} has no place in the layers"));
        for (dependency, kind) in dependencies {
            let to = place(&dependency).expect("a workspace package");
            let hidden_checks =
                from.layer == 6 && dependency == "grader" && kind == "dev-dependencies";
            if !may_depend(from, to) && !hidden_checks {
                wrong.push(format!("{package} ({kind}) -> {dependency}"));
            }
        }
    }
    assert!(wrong.is_empty(), "dependencies that run up the layers:\n{}", wrong.join("\n"));
}

/// The first circle of dependencies in `graph` (every kind of dependency counted, the
/// exercises' dev-dependency on the grader too), as the packages around it.
fn a_circle(graph: &BTreeMap<String, Vec<(String, &'static str)>>) -> Option<Vec<String>> {
    fn visit(
        package: &str,
        graph: &BTreeMap<String, Vec<(String, &'static str)>>,
        path: &mut Vec<String>,
        done: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        if let Some(start) = path.iter().position(|p| p == package) {
            let mut circle = path[start..].to_vec();
            circle.push(package.to_string());
            return Some(circle);
        }
        if done.iter().any(|d| d == package) {
            return None;
        }
        path.push(package.to_string());
        for (dependency, _) in graph.get(package).into_iter().flatten() {
            if let Some(circle) = visit(dependency, graph, path, done) {
                return Some(circle);
            }
        }
        path.pop();
        done.push(package.to_string());
        None
    }
    let mut done = Vec::new();
    graph.keys().find_map(|package| visit(package, graph, &mut Vec::new(), &mut done))
}

#[test]
fn nothing_forms_a_circle() {
    let graph = workspace_dependencies();
    if let Some(circle) = a_circle(&graph) {
        panic!("a circle of dependencies: {}", circle.join(" -> "));
    }
    // The grader may not depend on an exercise: each exercise dev-depends on it.
    let mut with_one = graph.clone();
    with_one.get_mut("grader").expect("the grader").push(("ex03".to_string(), "dependencies"));
    let circle = a_circle(&with_one).expect("grader -> ex03 -> grader");
    assert!(circle.contains(&"ex03".to_string()) && circle.contains(&"grader".to_string()));
}

#[test]
fn the_layers_are_known_and_ordered() {
    let at = |package| place(package).expect("placed");
    assert!(may_depend(at("lesson03"), at("lesson02")));
    assert!(!may_depend(at("lesson02"), at("lesson03")));
    assert!(!may_depend(at("lesson12"), at("registry")));
    assert!(!may_depend(at("gpu"), at("testkit")));
    assert!(may_depend(at("tour"), at("registry")));
    assert!(!may_depend(at("tour"), at("lab")));
    assert_eq!(place("something new"), None);
}
