//! The noop driver against the shared driver suite: `driver_conformance!`
//! reads its capabilities (none) and checks the host behaviour where a
//! container's would not apply. Real host processes, no engine.

use std::sync::Arc;

use iterion_driver_noop::NoopDriver;
use iterion_testkit::driver_conformance;

driver_conformance!(
    host,
    async { Arc::new(NoopDriver::new()) },
    "no-image-on-the-host"
);
