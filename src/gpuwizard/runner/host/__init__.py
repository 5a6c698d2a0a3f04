"""What the operating system and the cluster offer: process trees and their marker, cgroups, output-folder locks,
sbatch/squeue/scancel, the modules started as processes."""
