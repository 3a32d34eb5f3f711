//! fib
