//! Bounds end to end (issue 19 #5, #6) on dockerd and Podman: every
//! sandbox gets a memory limit with no extra swap and a process limit by
//! default (visible in `sandbox_started` and `doctor`), a memory hog is
//! killed at the limit while a modest node runs, and a tool's `timeout:`,
//! `budget: max_duration`, `budget: max_iterations` and `run --timeout`
//! each stop a run that would otherwise go on, with their typed codes,
//! while generous bounds let the same work finish. The attacks: 3 GiB
//! allocated without a murmur; a `timeout: "2s"` tool and a
//! `max_duration: "3s"` budget that ran 20 s to `finished`.

use serde_json::Value;

use crate::support::{
    Engine, Sandbox, busybox, leftovers, node_output, of_type, one, run_record, types,
};

fn block() -> String {
    format!(
        "  sandbox:\n    image: \"{}\"\n    host_state: none\n",
        busybox()
    )
}

/// Reads the sandbox's own cgroup limits.
fn limits_probe() -> String {
    format!(
        r#"schema limits:
  memory: string
  memsw: string
  pids: string

tool probe:
  command: `printf '{{"memory":"%s","memsw":"%s","pids":"%s"}}' "$(cat /sys/fs/cgroup/memory/memory.limit_in_bytes)" "$(cat /sys/fs/cgroup/memory/memory.memsw.limit_in_bytes)" "$(cat /sys/fs/cgroup/pids/pids.max)"`
  output: limits

workflow limits:
{}  entry: probe
  probe -> done
"#,
        block()
    )
}

#[test]
fn default_limits_bound_memory_swap_and_pids_and_are_visible() {
    const TWO_GIB: u64 = 2 << 30;
    for engine in Engine::ALL {
        let sb = Sandbox::new(engine);
        let file = sb.write("limits.iter", &limits_probe());
        let r = sb.run(&file, &[]);
        assert_eq!(r.code, Some(0), "{engine:?}: {}", r.stderr);
        let events = sb.events(&r.run_id());
        let got = node_output(&events, "probe");
        assert_eq!(got["memory"], TWO_GIB.to_string(), "{engine:?}: {got}");
        assert_eq!(
            got["memsw"],
            TWO_GIB.to_string(),
            "{engine:?}: no extra swap"
        );
        assert_eq!(got["pids"], "4096", "{engine:?}");
        let limits = &one(&events, "sandbox_started")["data"]["limits"];
        assert_eq!(limits["memory"], TWO_GIB, "{engine:?}: {limits}");
        assert_eq!(limits["memory_swap"], TWO_GIB, "{engine:?}: {limits}");
        assert_eq!(limits["pids"], 4096, "{engine:?}: {limits}");
    }
    let sb = Sandbox::new(Engine::Docker);
    let out = sb.iterion(&["sandbox", "doctor", "--json"]);
    assert!(out.status.success());
    let doc: Value = serde_json::from_slice(&out.stdout).expect("doctor json");
    let c = &doc["containment"];
    assert_eq!(c["memory"], "2GiB", "{c}");
    assert_eq!(c["memory_swap"], "2GiB", "{c}");
    assert_eq!(c["memory_source"], "default", "{c}");
    assert_eq!(c["pids_limit"], 4096, "{c}");
}

#[test]
fn operator_limits_replace_the_defaults_and_a_bad_one_is_bad_input() {
    for engine in Engine::ALL {
        let sb = Sandbox::new(engine)
            .with_env("ITERION_SANDBOX_MEMORY", "96MiB")
            .with_env("ITERION_SANDBOX_PIDS", "64");
        let file = sb.write("limits.iter", &limits_probe());
        let r = sb.run(&file, &[]);
        assert_eq!(r.code, Some(0), "{engine:?}: {}", r.stderr);
        let events = sb.events(&r.run_id());
        let got = node_output(&events, "probe");
        let bound = (96u64 << 20).to_string();
        assert_eq!(got["memory"], bound.as_str(), "{engine:?}: {got}");
        assert_eq!(got["memsw"], bound.as_str(), "{engine:?}: {got}");
        assert_eq!(got["pids"], "64", "{engine:?}: {got}");
    }
    // Unreadable, it would make discovery fail and `auto` degrade to the
    // host: refused as bad input before anything starts.
    let sb = Sandbox::new(Engine::Docker).with_env("ITERION_SANDBOX_MEMORY", "lots");
    let file = sb.write("limits.iter", &limits_probe());
    let r = sb.run(&file, &[]);
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(r.stderr.contains("ITERION_SANDBOX_MEMORY"), "{}", r.stderr);
    assert!(
        sb.iterion(&["runs", "--json"]).stdout.len() < 40,
        "a run was created"
    );
}

#[test]
fn a_memory_hog_is_killed_at_the_limit_and_a_modest_node_is_not() {
    let wf = format!(
        r#"tool modest:
  command: `x=$(head -c 16777216 /dev/zero | tr '\0' a); echo "modest-held ${{#x}}"`

tool hog:
  command: `x=$(head -c 268435456 /dev/zero | tr '\0' a); echo "hog-held ${{#x}}"`

workflow hog:
{}  entry: modest
  modest -> hog
  hog -> done
"#,
        block()
    );
    for engine in Engine::ALL {
        let sb = Sandbox::new(engine).with_env("ITERION_SANDBOX_MEMORY", "64MiB");
        let file = sb.write("hog.iter", &wf);
        let r = sb.run(&file, &[]);
        assert_eq!(r.code, Some(1), "{engine:?}: {}", r.stderr);
        assert_eq!(r.failure_code(), Some("NODE_FAILED"), "{engine:?}");
        let run_id = r.run_id();
        let events = sb.events(&run_id);
        assert_eq!(
            of_type(&events, "node_finished")
                .iter()
                .map(|e| e["node_id"].as_str().unwrap_or(""))
                .collect::<Vec<_>>(),
            ["modest"],
            "{engine:?}: {:?}",
            types(&events)
        );
        let failed = one(&events, "node_failed");
        assert_eq!(failed["node_id"], "hog");
        assert_eq!(failed["data"]["exit_code"], 137, "{engine:?}: {failed}");
        let hit = one(&events, "sandbox_limit_reached");
        assert_eq!(hit["data"]["limit"], "memory", "{engine:?}: {hit}");
        assert_eq!(hit["data"]["bound"], 64u64 << 20, "{engine:?}: {hit}");
        let logs = String::from_utf8_lossy(&sb.iterion(&["logs", &run_id]).stdout).into_owned();
        assert!(logs.contains("modest-held 16777216"), "{engine:?}: {logs}");
        assert!(
            !logs.contains("hog-held"),
            "{engine:?}: the hog got its memory"
        );
        assert!(leftovers(engine, &run_id).is_empty(), "{engine:?}");
    }
}

/// `first` runs within its bound, then `slow` would print `slept-through`
/// after 30 s.
fn slow_workflow(slow_props: &str, budget: &str) -> String {
    format!(
        r#"tool first:
  command: "echo first-done"
  timeout: "30s"

tool slow:
  command: "echo slow-started; sleep 30; echo slept-through"
{slow_props}
workflow slow:
{}{budget}  entry: first
  first -> slow
  slow -> done
"#,
        block()
    )
}

/// Run `wf` and check the shape every stopped-by-a-bound run shares: the
/// failure code, `first` finished, `slow` started and never finished its
/// sleep, nothing left on the engine. Returns the events.
fn stopped_by(engine: Engine, wf: &str, extra: &[&str], code: &str) -> (Sandbox, Vec<Value>) {
    let sb = Sandbox::new(engine);
    let file = sb.write("slow.iter", wf);
    let r = sb.run(&file, extra);
    assert_eq!(r.code, Some(1), "{engine:?}: {}", r.stderr);
    assert_eq!(r.status(), "failed", "{engine:?}: {}", r.stderr);
    assert_eq!(r.failure_code(), Some(code), "{engine:?}: {}", r.stderr);
    let run_id = r.run_id();
    assert_eq!(run_record(&sb, &run_id)["failure_code"], code);
    let logs = String::from_utf8_lossy(&sb.iterion(&["logs", &run_id]).stdout).into_owned();
    assert!(logs.contains("first-done"), "{engine:?}: {logs}");
    assert!(logs.contains("slow-started"), "{engine:?}: {logs}");
    assert!(
        !logs.contains("slept-through"),
        "{engine:?}: the bound did not stop it"
    );
    assert!(
        leftovers(engine, &run_id).is_empty(),
        "{engine:?}: sandbox left"
    );
    let events = sb.events(&run_id);
    let failed = one(&events, "node_failed");
    assert_eq!(failed["node_id"], "slow", "{engine:?}");
    assert_eq!(
        types(&events).last().map(String::as_str),
        Some("run_failed"),
        "{engine:?}"
    );
    assert!(
        !of_type(&events, "sandbox_cleanup").is_empty(),
        "{engine:?}"
    );
    (sb, events)
}

#[test]
fn a_node_timeout_kills_the_command_and_fails_the_run() {
    let wf = slow_workflow("  timeout: \"2s\"\n", "");
    for engine in Engine::ALL {
        let (_, events) = stopped_by(engine, &wf, &[], "TIMEOUT");
        let failed = one(&events, "node_failed");
        let error = failed["data"]["error"].as_str().unwrap_or("");
        assert!(error.contains("timeout of 2s"), "{engine:?}: {error}");
        assert!(of_type(&events, "budget_exceeded").is_empty());
    }
}

#[test]
fn budget_max_duration_stops_the_run() {
    // The budget counts from the run's start, sandbox boot included: 10 s
    // leaves a loaded engine time to start `slow`, 30 s short of its end.
    let wf = slow_workflow("", "  budget:\n    max_duration: \"10s\"\n");
    for engine in Engine::ALL {
        let (_, events) = stopped_by(engine, &wf, &[], "BUDGET_EXCEEDED");
        let exceeded = one(&events, "budget_exceeded");
        assert_eq!(exceeded["data"]["dimension"], "duration", "{engine:?}");
        assert_eq!(exceeded["data"]["limit"], 10000.0, "{engine:?}");
    }
}

#[test]
fn run_timeout_flag_stops_the_run() {
    let wf = slow_workflow("", "");
    for engine in Engine::ALL {
        let (_, events) = stopped_by(engine, &wf, &["--timeout", "10s"], "TIMEOUT");
        let error = one(&events, "run_failed")["data"]["error"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        assert!(error.contains("--timeout 10s"), "{engine:?}: {error}");
    }
    let sb = Sandbox::new(Engine::Docker);
    let file = sb.write("slow.iter", &wf);
    for bad in ["3", "0s", "soon"] {
        let r = sb.run(&file, &["--timeout", bad]);
        assert_eq!(r.code, Some(2), "--timeout {bad}: {}", r.stderr);
    }
}

#[test]
fn budget_max_iterations_stops_a_loop() {
    // Five laps end the loop (a counter in the workspace); the budget
    // counts node executions.
    let wf = |max: u32| {
        format!(
            r#"schema lap_out:
  n: int
  finished: bool

tool lap:
  command: `c=$(cat count 2>/dev/null || echo 0); c=$((c+1)); echo $c > count; if [ $c -ge 5 ]; then f=true; else f=false; fi; printf '{{"n": %s, "finished": %s}}' $c $f`
  output: lap_out

workflow laps:
{}  budget:
    max_iterations: {max}
  entry: lap
  lap -> lap when not finished as laps(10)
  lap -> done when finished
"#,
            block()
        )
    };
    for engine in Engine::ALL {
        let sb = Sandbox::new(engine);
        let file = sb.write("laps.iter", &wf(3));
        let r = sb.run(&file, &[]);
        assert_eq!(r.code, Some(1), "{engine:?}: {}", r.stderr);
        assert_eq!(r.failure_code(), Some("BUDGET_EXCEEDED"), "{engine:?}");
        let events = sb.events(&r.run_id());
        assert_eq!(of_type(&events, "node_finished").len(), 3, "{engine:?}");
        assert_eq!(of_type(&events, "node_started").len(), 3, "{engine:?}");
        let exceeded = one(&events, "budget_exceeded");
        assert_eq!(exceeded["data"]["dimension"], "iterations");
        assert_eq!(exceeded["data"]["limit"], 3.0);
        // The same loop within a generous budget finishes its five laps.
        let sb = Sandbox::new(engine);
        let file = sb.write("laps.iter", &wf(10));
        let r = sb.run(&file, &[]);
        assert_eq!(r.code, Some(0), "{engine:?}: {}", r.stderr);
        let events = sb.events(&r.run_id());
        assert_eq!(of_type(&events, "node_finished").len(), 5, "{engine:?}");
    }
}

#[test]
fn generous_bounds_let_the_same_work_finish() {
    let wf = format!(
        r#"tool first:
  command: "echo first-done"
  timeout: "30s"

tool nap:
  command: "sleep 1; echo napped"
  timeout: "20s"

workflow fine:
{}  budget:
    max_duration: "60s"
    max_iterations: 5
  entry: first
  first -> nap
  nap -> done
"#,
        block()
    );
    for engine in Engine::ALL {
        let sb = Sandbox::new(engine);
        let file = sb.write("fine.iter", &wf);
        let r = sb.run(&file, &["--timeout", "2m"]);
        assert_eq!(r.code, Some(0), "{engine:?}: {}", r.stderr);
        assert_eq!(r.status(), "finished");
        let events = sb.events(&r.run_id());
        assert!(of_type(&events, "budget_exceeded").is_empty());
    }
}

/// Writes a small report, then tries to fill the run-files dir.
fn filler() -> String {
    format!(
        r#"tool fill:
  command: `printf ok > "$ITERION_ARTIFACT_FILES_DIR/ok.txt" && (dd if=/dev/zero of="$ITERION_ARTIFACT_FILES_DIR/big" bs=1048576 count=160 2>&1 || true) && mount | grep -c ' /iterion/artifact-files '`

workflow fill:
{}  entry: fill
  fill -> done
"#,
        block()
    )
}

/// A 160 MiB flood into a run-files dir whose read-back cap is 8 MiB stops
/// at the bound (72 MiB) with ENOSPC in the sandbox, not on the host disk.
#[test]
fn the_run_files_dir_is_bounded_and_the_hit_is_reported() {
    for engine in Engine::ALL {
        let sb = Sandbox::new(engine).with_env("ITERION_SANDBOX_READBACK_CAP", "8MiB");
        let tmp = sb.dir.path().join("tmp");
        std::fs::create_dir_all(&tmp).expect("tmp");
        let sb = sb.with_env("TMPDIR", &tmp.to_string_lossy());
        let file = sb.write("fill.iter", &filler());
        let r = sb.run(&file, &[]);
        assert_eq!(r.code, Some(0), "{engine:?}: {}", r.stderr);
        let run_id = r.run_id();
        let logs = String::from_utf8_lossy(&sb.iterion(&["logs", &run_id]).stdout).into_owned();
        assert!(
            logs.contains("No space left on device"),
            "{engine:?}: {logs}"
        );
        let events = sb.events(&run_id);
        let hit = one(&events, "sandbox_limit_reached");
        assert_eq!(hit["data"]["limit"], "run_files", "{engine:?}: {hit}");
        // The cap plus 64 MiB of room (a member over the cap is still the
        // drain's to decline by name).
        assert_eq!(hit["data"]["bound"], 72u64 << 20, "{engine:?}: {hit}");
        // What fits the cap is kept: the small report is drained, the
        // flood is declined.
        let files = sb.files(&run_id);
        let paths: Vec<&str> = files["files"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|f| f["path"].as_str())
            .collect();
        assert!(paths.contains(&"ok.txt"), "{engine:?}: {files}");
        assert!(!paths.contains(&"big"), "{engine:?}: {files}");
        assert_eq!(files["drain"]["declined"][0], "/iterion/artifact-files/big");
        // The bound is gone with the run: no mount, no directory.
        let state = tmp.join("iterion").join("sandboxes").join(&run_id);
        assert!(!state.exists(), "{engine:?}: state dir left");
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        assert!(
            !mounts.contains(&run_id),
            "{engine:?}: mount left: {run_id}"
        );
    }
}

#[test]
fn a_writable_layer_the_engine_cannot_bound_is_reported_every_run() {
    // Both engines here keep layers on overlay over ext4, which cannot
    // enforce a size: each run says so, and still runs.
    for engine in Engine::ALL {
        let sb = Sandbox::new(engine).with_env("ITERION_SANDBOX_DISK", "64MiB");
        let file = sb.write("limits.iter", &limits_probe());
        let r = sb.run(&file, &[]);
        assert_eq!(r.code, Some(0), "{engine:?}: {}", r.stderr);
        let events = sb.events(&r.run_id());
        let gap = one(&events, "sandbox_limit_unenforced");
        assert_eq!(gap["data"]["limit"], "writable_layer", "{engine:?}: {gap}");
        assert!(
            gap["data"]["reason"]
                .as_str()
                .unwrap_or("")
                .contains("storage-opt"),
            "{engine:?}: {gap}"
        );
        let started = one(&events, "sandbox_started");
        assert!(
            started["data"]["limits"]["writable_layer"].is_null(),
            "{engine:?}: claims a bound it does not have: {started}"
        );
        let out = sb.iterion(&["sandbox", "doctor", "--json"]);
        let doc: Value = serde_json::from_slice(&out.stdout).expect("doctor json");
        let verdict = &doc["containment"]["writable_layer_enforced"][engine.driver()];
        assert_eq!(verdict["enforced"], false, "{engine:?}: {doc}");
    }
}
