//! PutMetricData through the AWS SDK (placeholder until the SDK lands).
#![forbid(unsafe_code)]
