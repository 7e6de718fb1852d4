"""Released bundles kept outside the build machine (a registry): above `readers`, which checks them, below `commands`."""
