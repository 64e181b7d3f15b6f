//! Jobs in nested modules, with every visibility.
mod a {
    pub mod b {
        #[mysqlq::job(queue = "deep")]
        pub async fn deep(n: u32) -> Result<(), mysqlq::JobError> {
            let _ = n;
            Ok(())
        }

        #[mysqlq::job]
        pub(crate) async fn crate_visible(n: u32) -> Result<(), mysqlq::JobError> {
            let _ = n;
            Ok(())
        }

        #[mysqlq::job]
        pub(super) async fn parent_visible(n: u32) -> Result<(), mysqlq::JobError> {
            let _ = n;
            Ok(())
        }
    }

    pub fn make() {
        let _ = b::ParentVisible { n: 1 };
    }
}

fn main() {
    use mysqlq::Job;
    let _ = a::b::Deep { n: 1 };
    let _ = a::b::CrateVisible { n: 2 };
    a::make();
    assert_eq!(a::b::Deep::QUEUE, "deep");
}
