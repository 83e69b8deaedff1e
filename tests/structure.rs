//! The house's one rule, held: each room of src/ uses only the rooms below it, as
//! ARCHITECTURE.md draws them. PID 1's half (pid1/) and the helper's (helper/) never
//! reach into each other or into the parser (cli/): they read their own part of the
//! plain settings (settings.rs), and meet only on the Board. A change that adds an
//! arrow back up, or a room this table does not place, fails here with the file and the
//! line, before a reviewer has to see it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The rooms from the ground up, each with the rooms it may use: only rooms listed
/// before it, so no arrow runs back up and none runs in a circle (checked below).
const FLOORS: &[(&str, &[&str])] = &[
    ("seconds", &[]),
    ("signal_names", &[]),
    ("sock_diag", &[]),
    ("kernel", &["signal_names"]),
    ("faults", &["kernel"]),
    ("board", &["kernel", "signal_names"]),
    ("logging", &["kernel", "faults"]),
    ("lookup", &["kernel", "seconds"]),
    ("panics", &["kernel", "logging"]),
    ("init", &["kernel", "logging", "signal_names"]),
    ("settings", &["logging", "signal_names"]),
    ("cli", &["settings", "logging", "signal_names", "seconds"]),
    ("probe", &["settings", "lookup", "seconds"]),
    (
        "mirror",
        &[
            "settings",
            "sock_diag",
            "init",
            "lookup",
            "logging",
            "kernel",
            "signal_names",
            "seconds",
        ],
    ),
    (
        "helper",
        &[
            "settings",
            "sock_diag",
            "board",
            "panics",
            "lookup",
            "logging",
            "faults",
            "kernel",
            "signal_names",
            "seconds",
        ],
    ),
    (
        "pid1",
        &[
            "settings",
            "board",
            "init",
            "lookup",
            "logging",
            "faults",
            "kernel",
            "signal_names",
            "seconds",
        ],
    ),
];

fn sources(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

/// The room a file of src/ belongs to: its folder, or its own name.
fn room_of(src: &Path, file: &Path) -> String {
    let first = file.strip_prefix(src).unwrap().components().next().unwrap();
    let name = first.as_os_str().to_string_lossy();
    name.trim_end_matches(".rs").to_string()
}

/// Every `crate::ROOM` a line of code names, comments left out; `crate::{a, b}` names
/// each.
fn rooms_named(line: &str) -> Vec<String> {
    let code = line.split("//").next().unwrap_or("");
    let mut named = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let inner = group.split('}').next().unwrap_or("");
            for item in inner.split(',') {
                let item = item.trim();
                let room: String = item
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !room.is_empty() {
                    named.push(room);
                }
            }
        } else {
            let room: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            named.push(room);
        }
    }
    named
}

#[test]
fn the_floors_are_a_ladder() {
    let mut below: Vec<&str> = Vec::new();
    for (room, uses) in FLOORS {
        for used in *uses {
            assert!(
                below.contains(used),
                "{room} may use {used}, which is not below it in FLOORS: no arrow may run back up"
            );
        }
        below.push(room);
    }
}

#[test]
fn each_room_uses_only_the_rooms_below_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    files.sort();
    let floors: BTreeMap<&str, &[&str]> = FLOORS.iter().copied().collect();
    let mut wrong = Vec::new();
    for file in &files {
        let room = room_of(&src, file);
        // main.rs wires the programs together and may know them all.
        if room == "main" {
            continue;
        }
        let Some(allowed) = floors.get(room.as_str()) else {
            wrong.push(format!(
                "{}: the room '{room}' has no floor in tests/structure.rs (FLOORS): place it, and draw it in ARCHITECTURE.md",
                file.display()
            ));
            continue;
        };
        let text = std::fs::read_to_string(file).unwrap();
        for (number, line) in text.lines().enumerate() {
            for named in rooms_named(line) {
                if named != room && !allowed.contains(&named.as_str()) {
                    wrong.push(format!(
                        "{}:{}: {room} uses {named}, which is not below it: {}",
                        file.strip_prefix(&src).unwrap().display(),
                        number + 1,
                        line.trim()
                    ));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "arrows against the floors:\n{}",
        wrong.join("\n")
    );
    // Every room main.rs declares has a floor, and every floor a room.
    let main = std::fs::read_to_string(src.join("main.rs")).unwrap();
    let declared: Vec<&str> = main
        .lines()
        .filter_map(|l| l.strip_prefix("mod ")?.strip_suffix(';'))
        .collect();
    let mut placed: Vec<&str> = FLOORS.iter().map(|(room, _)| *room).collect();
    placed.sort();
    let mut declared_sorted = declared.clone();
    declared_sorted.sort();
    assert_eq!(declared_sorted, placed, "main.rs's rooms and FLOORS differ");
}

#[test]
fn the_check_sees_an_arrow_back_up() {
    // A line PID 1's half must never hold, in each form the check reads.
    assert_eq!(rooms_named("use crate::helper::endpoint;"), ["helper"]);
    assert_eq!(
        rooms_named("use crate::{cli, board::Board};"),
        ["cli", "board"]
    );
    assert_eq!(
        rooms_named("let x = crate::cli::parse(a); // crate::helper"),
        ["cli"]
    );
    assert!(rooms_named("// crate::helper in a comment").is_empty());
}
