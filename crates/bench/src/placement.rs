//! Where a bench's hosts and elements run: cores of their own where the machine has them
//! (`cpus` on each lab node), planned the same way for `bench scale` and `bench forward`
//! (docs/scale.md, "Placement").

/// Each host's CPU list and each element's, in order.
pub type Placed = (Vec<String>, Vec<String>);

/// Gives each host two cores (its generator, its sink) and each element one, from CPU 1
/// (CPU 0 too if that is all there is), where the machine has them all; three per host
/// (the receive work's NAPI thread apart) where it has those too. The note says what was
/// done. With `spare_to_last`, the last element (the interconnection, which stands for a
/// hardware switch and must not be what limits the router) also gets every core left over.
pub fn plan_cpus(hosts: usize, elements: usize, spare_to_last: bool) -> (Option<Placed>, String) {
    plan_cpus_for(hosts, &vec![1; elements], spare_to_last)
}

/// As [`plan_cpus`], element `i` getting `widths[i]` cores (an LB of two, say).
pub fn plan_cpus_for(
    hosts: usize,
    widths: &[usize],
    spare_to_last: bool,
) -> (Option<Placed>, String) {
    plan_cpus_on(&io::placement::online_cpus(), hosts, widths, spare_to_last)
}

/// [`plan_cpus_for`] on a machine whose online CPUs are `online`.
fn plan_cpus_on(
    online: &[usize],
    hosts: usize,
    widths: &[usize],
    spare_to_last: bool,
) -> (Option<Placed>, String) {
    let elements = widths.len();
    let cores: usize = widths.iter().sum();
    let need = 2 * hosts + cores;
    if online.len() < need {
        return (
            None,
            format!(
                "not placed: {hosts} hosts (2 cores each) and {elements} elements ({cores} cores) need {need} cores, this machine has {}; the scheduler shares them",
                online.len()
            ),
        );
    }
    let per_host = if online.len() > need + hosts { 3 } else { 2 };
    let need = per_host * hosts + cores;
    let start = if online.len() > need { 1 } else { 0 };
    let mut next = online[start..].iter();
    let mut take = |n: usize| -> String {
        let v: Vec<usize> = next.by_ref().take(n).copied().collect();
        io::placement::CpuList::of(&v).to_string()
    };
    let h = (0..hosts).map(|_| take(per_host)).collect();
    let mut e: Vec<String> = widths.iter().map(|&w| take(w.max(1))).collect();
    let mut spare = String::new();
    if spare_to_last && elements > 0 {
        let rest = online.len() - start - need;
        if rest > 0 {
            e[elements - 1] = take_with(&e[elements - 1], next.copied().collect());
            spare = format!("; the interconnection also on the {rest} left over");
        }
    }
    (
        Some((h, e)),
        format!(
            "placed: {need} cores of {}, each host ({per_host} cores) and element on its own{spare}",
            online.len()
        ),
    )
}

/// A CPU list with more CPUs added.
pub(crate) fn take_with(list: &str, more: Vec<usize>) -> String {
    let mut v: Vec<usize> = io::placement::CpuList::parse(list)
        .map(|c| c.cpus())
        .unwrap_or_default();
    v.extend(more);
    io::placement::CpuList::of(&v).to_string()
}

/// Gives every host of a lab two cores (its generator or sink, its receive work; three
/// where there are enough) and every element one, where the machine has them all
/// (`bench scale`'s plan): `cpus` on each node, so that an element pins its workers and
/// ports' NAPI threads there, `lab exec` runs there, and [`place_hosts`] moves the hosts'
/// and a kernel router's receive work there. Returns whether it did, and what it did or
/// why not.
pub(crate) fn place_nodes(l: &mut lab::Lab) -> (bool, String) {
    let (plan, note) = plan_cpus(l.topo.host.len(), l.topo.element.len(), false);
    let Some((h, e)) = plan else {
        return (false, note);
    };
    for (host, c) in l.topo.host.iter_mut().zip(h) {
        host.cpus = Some(c);
    }
    for (el, c) in l.topo.element.iter_mut().zip(e) {
        el.cpus = Some(c);
    }
    (true, note)
}

/// Where a bench's lab runs: `split` ([`place_split`], `bench forward --split-cores`), else
/// [`place_nodes`].
pub(crate) fn place_for(split: bool, l: &mut lab::Lab) -> (bool, String) {
    if split {
        place_split(l)
    } else {
        place_nodes(l)
    }
}

/// On a machine too small for [`place_nodes`]: a lab of one element (the router) gets the
/// last online CPU for it (its workers and its ports' NAPI threads, or a kernel router's
/// receive work, by [`place_hosts`]) and the others for every host together, so that the
/// router never shares its core with a generator or a sink and never moves between
/// runs. Without it, on two cores, the scheduler puts the router's receive thread beside
/// a sink's now and apart from it a minute later, and the same router's peak moves
/// twofold between points (`bench forward --split-cores`, docs/measurement.md). None
/// where the lab has more than one element or the machine one CPU.
pub(crate) fn place_split(l: &mut lab::Lab) -> (bool, String) {
    let Some((hosts, router)) = split_cpus(&io::placement::online_cpus(), l.topo.element.len())
    else {
        return (
            false,
            "not placed: --split-cores needs one element and two CPUs".into(),
        );
    };
    for host in l.topo.host.iter_mut() {
        host.cpus = Some(hosts.clone());
    }
    for el in l.topo.element.iter_mut() {
        el.cpus = Some(router.clone());
    }
    (
        true,
        format!("split: the router on CPU {router}, the hosts on CPUs {hosts}"),
    )
}

/// [`place_split`]'s plan on a machine whose online CPUs are `online`: the hosts' CPU
/// list and the router's.
fn split_cpus(online: &[usize], elements: usize) -> Option<(String, String)> {
    if elements != 1 || online.len() < 2 {
        return None;
    }
    let (last, rest) = online.split_last()?;
    Some((
        io::placement::CpuList::of(rest).to_string(),
        last.to_string(),
    ))
}

/// After [`place_nodes`] (and GRO on, which gives a veth its NAPI): every host's receive
/// work, and a kernel router's, in NAPI threads on its own cores.
pub(crate) fn place_hosts(l: &lab::Lab, kernel_router: bool) -> Result<(), String> {
    for h in &l.topo.host {
        l.napi_threads(&h.name)?;
        l.place(&h.name)?;
    }
    if kernel_router {
        l.napi_threads("r")?;
        l.place("r")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cores_are_planned_where_the_machine_has_them() {
        let cpus: Vec<usize> = (0..16).collect();
        // Two hosts and seven elements on 16: three cores a host, from CPU 1, and the
        // interconnection (the last element) on the two left over too.
        let (p, note) = plan_cpus_on(&cpus, 2, &[1; 7], true);
        let (h, e) = p.unwrap();
        assert_eq!(h, ["1-3", "4-6"]);
        assert_eq!(&e[..6], ["7", "8", "9", "10", "11", "12"]);
        assert_eq!(e[6], "13-15");
        assert!(note.starts_with("placed: 13 cores of 16"), "{note}");
        // Four hosts and five elements: two cores a host.
        let (p, _) = plan_cpus_on(&cpus, 4, &[1; 5], false);
        let (h, e) = p.unwrap();
        assert_eq!(h[3], "7-8");
        assert_eq!(e, ["9", "10", "11", "12", "13"]);
        // Exactly enough: CPU 0 too.
        let (p, _) = plan_cpus_on(&cpus, 4, &[1; 8], false);
        assert_eq!(p.unwrap().0[0], "0-1");
        // Too few: nothing placed, and why.
        let (p, note) = plan_cpus_on(&[0, 1], 2, &[1; 1], false);
        assert!(p.is_none());
        assert!(note.starts_with("not placed: 2 hosts"), "{note}");
        // Two networks, LBs of two cores, two back-ends and the switch: the LBs' two
        // cores each side by side, three cores a host.
        let (p, note) = plan_cpus_on(&cpus, 2, &[2, 2, 1, 1, 1], true);
        let (h, e) = p.unwrap();
        assert_eq!(h, ["1-3", "4-6"]);
        assert_eq!(e, ["7-8", "9-10", "11", "12", "13-15"]);
        assert!(note.starts_with("placed: 13 cores of 16"), "{note}");
    }

    #[test]
    fn a_split_gives_the_router_the_last_cpu_and_the_hosts_the_rest() {
        assert_eq!(
            split_cpus(&[0, 1], 1),
            Some(("0".to_string(), "1".to_string()))
        );
        assert_eq!(
            split_cpus(&[0, 1, 2, 3], 1),
            Some(("0-2".to_string(), "3".to_string()))
        );
        assert_eq!(split_cpus(&[0], 1), None);
        assert_eq!(split_cpus(&[0, 1, 2, 3], 3), None);
    }
}
