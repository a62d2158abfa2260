//! Setup failures end as the one classifier says (facts §9.2,
//! `iterion_sandbox::classify`): a missing image is deterministic, a failed
//! `post_create` is a transient start failure (resumable), a stalled one a
//! setup timeout (infrastructure); nothing is left behind either way.

use crate::run_e2e::{inline_block, where_workflow};
use crate::support::{
    Engine, Sandbox, busybox, container_exists, leftovers, of_type, one, run_record,
};

#[test]
fn missing_image_is_a_typed_failure_without_a_container() {
    for engine in Engine::ALL {
        let sb = Sandbox::new(engine).with_env("ITERION_SANDBOX_PULL_TIMEOUT", "20s");
        let file = sb.write(
            "w.iter",
            &where_workflow(&inline_block("127.0.0.1:1/iterion-e2e/missing:nope")),
        );
        let r = sb.run(&file, &[]);
        assert_eq!(r.code, Some(1), "{}", r.stderr);
        assert_eq!(r.status(), "failed");
        assert_eq!(
            r.failure_code(),
            Some("SANDBOX_IMAGE_UNAVAILABLE"),
            "{}",
            r.stderr
        );
        let run_id = r.run_id();
        assert!(!container_exists(engine, &run_id));
        let events = sb.events(&run_id);
        assert!(of_type(&events, "node_started").is_empty());
        assert_eq!(
            one(&events, "run_failed")["data"]["failure_code"],
            "SANDBOX_IMAGE_UNAVAILABLE"
        );
    }
}

/// A failed post_create is a start failure: transient, so the run stays
/// resumable (issue 14 item 8(c): it was classed transient but ended
/// `failed`), and `run_failed` says the same status and disposition.
#[test]
fn failing_post_create_is_a_start_failure_and_removes_the_container() {
    for engine in Engine::ALL {
        let sb = Sandbox::new(engine);
        let file = sb.write(
            "w.iter",
            &where_workflow(&format!(
                "  sandbox:\n    image: \"{}\"\n    host_state: none\n    post_create: \"echo setting up; exit 3\"\n",
                busybox()
            )),
        );
        let r = sb.run(&file, &[]);
        assert_eq!(r.code, Some(1), "{}", r.stderr);
        assert_eq!(r.status(), "failed_resumable");
        assert_eq!(
            r.failure_code(),
            Some("SANDBOX_START_FAILED"),
            "{}",
            r.stderr
        );
        let run_id = r.run_id();
        assert!(
            !container_exists(engine, &run_id),
            "{engine:?}: container left"
        );
        let events = sb.events(&run_id);
        assert!(of_type(&events, "node_started").is_empty());
        let failed = &one(&events, "run_failed")["data"];
        assert_eq!(failed["status"], "failed_resumable", "{failed}");
        assert_eq!(failed["disposition"], "transient", "{failed}");
        assert_eq!(run_record(&sb, &run_id)["status"], "failed_resumable");
    }
}

/// `ITERION_SANDBOX_POST_CREATE_TIMEOUT` bounds the post-create commands
/// (issue 14 item 7, upstream #719): past it the run fails
/// `SANDBOX_SETUP_TIMEOUT` (resumable: an infrastructure failure), what
/// they printed is in the log, nothing is left.
#[test]
fn post_create_past_its_bound_is_a_setup_timeout() {
    for engine in Engine::ALL {
        let sb = Sandbox::new(engine).with_env("ITERION_SANDBOX_POST_CREATE_TIMEOUT", "3s");
        let file = sb.write(
            "w.iter",
            &where_workflow(&format!(
                "  sandbox:\n    image: \"{}\"\n    host_state: none\n    post_create: \"echo setting up; sleep 300; echo slept-through\"\n",
                busybox()
            )),
        );
        let r = sb.run(&file, &[]);
        assert_eq!(r.code, Some(1), "{engine:?}: {}", r.stderr);
        assert_eq!(
            (r.status(), r.failure_code()),
            ("failed_resumable", Some("SANDBOX_SETUP_TIMEOUT")),
            "{engine:?}: {}",
            r.stderr
        );
        let run_id = r.run_id();
        assert!(
            leftovers(engine, &run_id).is_empty(),
            "{engine:?}: sandbox left"
        );
        let events = sb.events(&run_id);
        assert!(of_type(&events, "node_started").is_empty());
        let error = one(&events, "run_failed")["data"]["error"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        assert!(
            error.contains("ITERION_SANDBOX_POST_CREATE_TIMEOUT"),
            "{engine:?}: {error}"
        );
        let logs = String::from_utf8_lossy(&sb.iterion(&["logs", &run_id]).stdout).into_owned();
        assert!(logs.contains("setting up"), "{engine:?}: {logs}");
        assert!(!logs.contains("slept-through"), "{engine:?}: {logs}");
    }
}
