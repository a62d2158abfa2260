//! An independent check of an AWS Signature Version 4 request signature,
//! written from AWS's published algorithm with nothing but SHA-256 (no
//! AWS crate), so a test can hold what the engine's signer (the official
//! `aws-sigv4` crate) produced against the specification rather than
//! against itself.

use sha2::{Digest, Sha256};

use crate::provider::RecordedRequest;

/// What a verified signature said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The access key id of the credential scope.
    pub access_key_id: String,
    /// `YYYYMMDD` of the scope.
    pub date: String,
    /// The signed header names.
    pub signed_headers: Vec<String>,
}

fn sha256_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

fn hmac(key: &[u8], msg: &[u8]) -> Vec<u8> {
    const BLOCK: usize = 64;
    let mut k = if key.len() > BLOCK {
        Sha256::digest(key).to_vec()
    } else {
        key.to_vec()
    };
    k.resize(BLOCK, 0);
    let ipad: Vec<u8> = k.iter().map(|b| b ^ 0x36).collect();
    let opad: Vec<u8> = k.iter().map(|b| b ^ 0x5c).collect();
    let mut inner = Sha256::new();
    inner.update(&ipad);
    inner.update(msg);
    let inner = inner.finalize();
    let mut outer = Sha256::new();
    outer.update(&opad);
    outer.update(inner);
    outer.finalize().to_vec()
}

/// URI-encode every byte but the unreserved ones (and `/` when
/// `keep_slash`), as SigV4's canonical URI requires.
fn uri_encode(s: &str, keep_slash: bool) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric()
            || matches!(b, b'-' | b'_' | b'.' | b'~')
            || (keep_slash && b == b'/')
        {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Check `req`'s `Authorization` header against `secret` for `region`
/// and `service` (non-S3 rules: the path as sent is encoded once more; no
/// query string). `Err` says which part does not hold.
pub fn verify(
    req: &RecordedRequest,
    secret: &str,
    region: &str,
    service: &str,
) -> Result<Verified, String> {
    let auth = req
        .header("authorization")
        .ok_or("no authorization header")?;
    let rest = auth
        .strip_prefix("AWS4-HMAC-SHA256 ")
        .ok_or_else(|| format!("not a SigV4 authorization: {auth}"))?;
    let mut credential = None;
    let mut signed = None;
    let mut signature = None;
    for part in rest.split(',') {
        let (k, v) = part
            .trim()
            .split_once('=')
            .ok_or("malformed authorization")?;
        match k {
            "Credential" => credential = Some(v),
            "SignedHeaders" => signed = Some(v),
            "Signature" => signature = Some(v),
            _ => {}
        }
    }
    let (credential, signed, signature) = (
        credential.ok_or("no Credential")?,
        signed.ok_or("no SignedHeaders")?,
        signature.ok_or("no Signature")?,
    );
    let scope_parts: Vec<&str> = credential.split('/').collect();
    let [key_id, date, scope_region, scope_service, "aws4_request"] = scope_parts.as_slice() else {
        return Err(format!("malformed credential scope {credential}"));
    };
    if *scope_region != region || *scope_service != service {
        return Err(format!(
            "scope {scope_region}/{scope_service}, expected {region}/{service}"
        ));
    }
    let amz_date = req.header("x-amz-date").ok_or("no x-amz-date")?;
    if !amz_date.starts_with(date) {
        return Err(format!(
            "x-amz-date {amz_date} is not of the scope's day {date}"
        ));
    }
    let names: Vec<&str> = signed.split(';').collect();
    for required in ["host", "x-amz-date"] {
        if !names.contains(&required) {
            return Err(format!("{required} is not signed"));
        }
    }
    let mut canonical_headers = String::new();
    for n in &names {
        let v = req
            .header(n)
            .ok_or_else(|| format!("signed header {n} is missing"))?;
        let v = v.split_whitespace().collect::<Vec<_>>().join(" ");
        canonical_headers.push_str(&format!("{n}:{v}\n"));
    }
    let (path, query) = req.path.split_once('?').unwrap_or((&req.path, ""));
    if !query.is_empty() {
        return Err("a query string is not expected here".to_owned());
    }
    let canonical = format!(
        "{}\n{}\n\n{}\n{}\n{}",
        req.method,
        uri_encode(path, true),
        canonical_headers,
        signed,
        sha256_hex(req.raw.as_bytes()),
    );
    let scope = format!("{date}/{region}/{service}/aws4_request");
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
        sha256_hex(canonical.as_bytes())
    );
    let k_date = hmac(format!("AWS4{secret}").as_bytes(), date.as_bytes());
    let k_region = hmac(&k_date, region.as_bytes());
    let k_service = hmac(&k_region, service.as_bytes());
    let k_signing = hmac(&k_service, b"aws4_request");
    let expected = hex::encode(hmac(&k_signing, to_sign.as_bytes()));
    if expected != signature {
        return Err(format!(
            "signature mismatch: the request's {signature} is not {expected}"
        ));
    }
    Ok(Verified {
        access_key_id: (*key_id).to_owned(),
        date: (*date).to_owned(),
        signed_headers: names.iter().map(|s| (*s).to_owned()).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 4231 test case 2, and AWS's own documented signing-key example
    /// (the `iam` GET in the SigV4 documentation's worked example).
    #[test]
    fn hmac_and_signing_key_match_published_vectors() {
        assert_eq!(
            hex::encode(hmac(b"Jefe", b"what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        let k = hmac(b"AWS4wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", b"20150830");
        let k = hmac(&k, b"us-east-1");
        let k = hmac(&k, b"iam");
        let k = hmac(&k, b"aws4_request");
        assert_eq!(
            hex::encode(k),
            "c4afb1cc5771d871763a393e44b703571b55cc28424d1a5e86da6ed3c154a4b9"
        );
    }
}
