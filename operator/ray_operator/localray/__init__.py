"""The local Ray agent of `ray-operator dev`: real Ray processes for Pods KWOK runs on the fake
node, so RayJobs finish and RayServices answer on one machine (`plan` decides, `processes` runs,
`agent` watches Pods and keeps the two in step)."""
