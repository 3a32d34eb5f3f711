//! Control: configuration, route sources, the control socket, and the run loops that wire
//! ports, data plane and control together for each element.

pub mod axon;
pub mod balancer;
pub mod capturing;
pub mod config;
pub mod ctlsock;
pub mod distrib;
pub mod drain;
pub mod fast;
pub mod filters;
pub mod flows;
pub mod fuzzing;
pub mod lbfast;
pub mod metrics;
pub mod remote_filters;
pub mod routes;
pub mod run;
pub mod showconfig;
pub mod statelog;
pub mod switch;
pub mod tables;
pub mod vcp;

pub use config::{ConfigError, ForwarderFile};
