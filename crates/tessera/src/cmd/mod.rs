//! The binary's commands, one module each (argument definitions and what runs them).

pub(crate) mod bench;
pub(crate) mod dist;
pub(crate) mod elements;
pub(crate) mod lab;
