"""The guest image builder: a bootable guest from Debian packages.

  store    the image cache: GuestImage, where images live, atomic install
  recipe   images/<name>/recipe.json
  apt      Debian packages: versions (apt-cache), download, dpkg -x
  packages a recipe's packages with their dependencies (apt's resolver)
  host     host programs for the guest (perf, tools) and their libraries
  inputs   the inputs and their hash (when to rebuild)
  kernel   ELF readers (load address, banner, .modinfo); the boot
           image's ELF kernel and entry through the host's Arch
  userkernel  a kernel the user built (--kernel): checks, driver module
  sysmap   /proc/kallsyms and System.map lines, parsed once
  modules  kernel module dependencies and load order
  cpio     newc archives (the initramfs)
  root     the guest root tree (modules, busybox, perf, /init, driver)
  smoke    the test boot through the VM launcher (System.map, smoke test)
  build    build_image and image_status: the steps, in order

The public API is re-exported here.
"""
from ..errors import ImageError
from .build import build_image, image_status
from .store import GuestImage, image_dir

__all__ = ["GuestImage", "ImageError", "build_image", "image_dir",
           "image_status"]
