//! The deepest event payload a store accepts. serde_json refuses to read a
//! document nested past 128 levels, so a deeper payload would be stored and
//! then never readable: both stores refuse it at append, with the same
//! error (`store_conformance!` holds them to it).

use iterion_core::{RunId, StoreError};
use serde_json::Value;

/// Deepest nesting of arrays and objects accepted.
pub const MAX_DEPTH: usize = 100;

/// `InvalidPayload` for a payload nested deeper than [`MAX_DEPTH`].
pub fn check_depth(run: &RunId, data: &Value) -> Result<(), StoreError> {
    if too_deep(data, MAX_DEPTH) {
        return Err(StoreError::InvalidPayload {
            run: run.clone(),
            reason: "nested deeper than 100 arrays/objects",
        });
    }
    Ok(())
}

fn too_deep(v: &Value, budget: usize) -> bool {
    match v {
        Value::Array(a) => budget == 0 || a.iter().any(|x| too_deep(x, budget - 1)),
        Value::Object(o) => budget == 0 || o.values().any(|x| too_deep(x, budget - 1)),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn nested(depth: usize) -> Value {
        (0..depth).fold(json!(1), |inner, _| json!([inner]))
    }

    #[test]
    fn the_bound_is_exactly_max_depth() {
        let run = RunId::parse("r").expect("id");
        assert!(check_depth(&run, &nested(MAX_DEPTH)).is_ok());
        assert!(check_depth(&run, &json!({"a": nested(MAX_DEPTH - 1)})).is_ok());
        for deep in [nested(MAX_DEPTH + 1), json!({"a": nested(MAX_DEPTH)})] {
            assert!(matches!(
                check_depth(&run, &deep),
                Err(StoreError::InvalidPayload { .. })
            ));
        }
    }
}
