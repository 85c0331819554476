//! `merge`: a fan-in barrier. The scheduler makes it ready once every incoming branch has
//! arrived or been ruled out; running it just records `{merged: true}`.

use serde_json::json;

use super::{Failure, Outcome, Route};

pub fn execute() -> Result<Outcome, Failure> {
    Ok(Outcome::new(json!({"merged": true}), Route::All))
}
