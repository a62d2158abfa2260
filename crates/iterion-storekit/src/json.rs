//! JSON columns, read and written the one way both stores do: a value that
//! does not encode or decode is a `Backend` error naming the operation,
//! never a panic and never a silently empty field.

use iterion_core::StoreError;

/// A decoding failure of `what` (a column, a field), with why.
pub fn decode_err(what: &'static str, msg: String) -> StoreError {
    StoreError::Backend {
        operation: what,
        source: msg.into(),
    }
}

/// `v` as a JSON document.
pub fn to_json<T: serde::Serialize>(what: &'static str, v: &T) -> Result<String, StoreError> {
    serde_json::to_string(v).map_err(|e| decode_err(what, e.to_string()))
}

/// An optional JSON column, decoded.
pub fn json_field<T: serde::de::DeserializeOwned>(
    what: &'static str,
    v: Option<String>,
) -> Result<Option<T>, StoreError> {
    v.map(|s| serde_json::from_str(&s).map_err(|e| decode_err(what, e.to_string())))
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_column_that_does_not_decode_is_a_backend_error_naming_it() {
        assert_eq!(json_field::<u32>("decode n", None).expect("none"), None);
        assert_eq!(
            json_field::<u32>("decode n", Some("7".into())).expect("7"),
            Some(7)
        );
        match json_field::<u32>("decode n", Some("{".into())) {
            Err(StoreError::Backend { operation, .. }) => assert_eq!(operation, "decode n"),
            other => panic!("{other:?}"),
        }
        assert_eq!(to_json("encode", &vec![1, 2]).expect("json"), "[1,2]");
    }
}
