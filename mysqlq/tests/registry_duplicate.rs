//! Two jobs registered under one kind name: the registry refuses them, naming both places.

use mysqlq::{Error, Registry};

mod billing {
    #[mysqlq::job(name = "dup", queue = "billing")]
    pub(crate) async fn charge(invoice: u64) -> Result<(), mysqlq::JobError> {
        let _ = invoice;
        Ok(())
    }
}

mod mail {
    #[mysqlq::job(name = "dup")]
    pub(crate) async fn send(to: String) -> Result<(), mysqlq::JobError> {
        let _ = to;
        Ok(())
    }
}

#[test]
fn duplicate_kind_names_both_locations() {
    let err = Registry::from_inventory().expect_err("two jobs are named `dup`");
    let Error::DuplicateKind {
        kind,
        first,
        second,
    } = &err
    else {
        panic!("expected DuplicateKind, got {err:?}");
    };
    assert_eq!(kind, "dup");
    let file = file!();
    let mut places = [first.clone(), second.clone()];
    places.sort();
    // The locations are the lines of the two `#[mysqlq::job(name = "dup")]` attributes.
    assert_eq!(places, [format!("{file}:14"), format!("{file}:6")]);
    let message = err.to_string();
    assert!(
        message.contains(&format!("{file}:6")) && message.contains(&format!("{file}:14")),
        "{message}"
    );
    assert!(message.contains("`dup`"), "{message}");
    // The jobs themselves are fine.
    let _ = (
        billing::Charge { invoice: 1 },
        mail::Send { to: String::new() },
    );
}
