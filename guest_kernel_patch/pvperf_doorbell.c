// SPDX-License-Identifier: GPL-2.0
/*
 * pvperf_doorbell.c - the overflow interrupt as an ordinary MSI-X
 * interrupt of QEMU's ivshmem-doorbell device (PCI 1af4:1110).
 *
 * The host (pvperf's service, the device's ivshmem server) holds one
 * eventfd per vector and writes vector N's after it wrote records into
 * CPU N's sample ring; QEMU raises the MSI-X vector.  Vectors get managed
 * affinity, one per possible CPU in order, so vector N is taken on CPU N
 * and its handler drains that CPU's ring.  It is an ordinary interrupt,
 * not an NMI: the sample's ip and registers come from the host's record
 * of the overflowing instruction, not from where the interrupt lands, so
 * nothing needs NMI context, and there is no "NMI for unknown reason" to
 * avoid (docs/design/design.md, "The overflow interrupt").  The same code serves
 * every architecture whose kernel has PCI MSI-X (arm64: through the GIC's
 * ITS or GICv2m); only the fallback interrupt is architecture-specific.
 *
 * No device: the driver keeps the architecture's interrupt (x86: the NMI
 * that pvperf raises over QMP when asked to, pvperf run --overflow-irq qmp).
 */

#define pr_fmt(fmt) "pvperf: " fmt

#include <linux/cpumask.h>
#include <linux/interrupt.h>
#include <linux/irq.h>
#include <linux/pci.h>

#include "pvperf.h"
#include "pvperf_arch.h"

#define PVPERF_DOORBELL_VENDOR	0x1af4
#define PVPERF_DOORBELL_DEVICE	0x1110

static pvperf_overflow_handler_fn pvperf_doorbell_handler;
static int pvperf_doorbell_vectors;	/* > 0 once bound */

static irqreturn_t pvperf_doorbell_irq(int irq, void *data)
{
	/*
	 * Always ours: a vector only this device raises.  A spurious one
	 * (the host re-rings a ring after a checkpoint) finds nothing to
	 * drain and costs one pass over an empty ring.
	 */
	pvperf_doorbell_handler(get_irq_regs());
	return IRQ_HANDLED;
}

/* Vector N must land on CPU N (its ring); managed affinity spreads them
 * in order, but say so if the kernel chose otherwise. */
static void pvperf_doorbell_check_affinity(struct pci_dev *pdev, int n)
{
	int i;

	for (i = 0; i < n; i++) {
		const struct cpumask *m = pci_irq_get_affinity(pdev, i);

		if (m && !cpumask_test_cpu(i, m))
			pr_warn("doorbell vector %d is not bound to cpu %d: its samples wait for a drain\n",
				i, i);
	}
}

static void pvperf_doorbell_free(struct pci_dev *pdev, int n)
{
	while (n-- > 0)
		free_irq(pci_irq_vector(pdev, n), pdev);
	pci_free_irq_vectors(pdev);
}

static int pvperf_doorbell_probe(struct pci_dev *pdev,
				 const struct pci_device_id *id)
{
	int n = num_possible_cpus();
	int err, i;

	if (pvperf_doorbell_vectors)
		return -EBUSY;		/* one device serves every CPU */
	err = pcim_enable_device(pdev);
	if (err)
		return err;
	/* An MSI is a memory write by the device: QEMU drops it unless the
	 * device may master the bus. */
	pci_set_master(pdev);
	err = pci_alloc_irq_vectors(pdev, n, n, PCI_IRQ_MSIX | PCI_IRQ_AFFINITY);
	if (err < 0) {
		pr_warn("doorbell: %d MSI-X vectors: %d\n", n, err);
		return err;
	}
	for (i = 0; i < n; i++) {
		err = request_irq(pci_irq_vector(pdev, i), pvperf_doorbell_irq,
				  0, "pvperf", pdev);
		if (err) {
			pvperf_doorbell_free(pdev, i);
			return err;
		}
	}
	pvperf_doorbell_check_affinity(pdev, n);
	pvperf_doorbell_vectors = n;
	pr_info("overflow interrupt: doorbell MSI-X, %d vectors\n", n);
	return 0;
}

static void pvperf_doorbell_remove(struct pci_dev *pdev)
{
	pvperf_doorbell_free(pdev, pvperf_doorbell_vectors);
	pvperf_doorbell_vectors = 0;
}

static const struct pci_device_id pvperf_doorbell_ids[] = {
	{ PCI_DEVICE(PVPERF_DOORBELL_VENDOR, PVPERF_DOORBELL_DEVICE) },
	{ }
};

static struct pci_driver pvperf_doorbell_driver = {
	.name = "pvperf-doorbell",
	.id_table = pvperf_doorbell_ids,
	.probe = pvperf_doorbell_probe,
	.remove = pvperf_doorbell_remove,
};

/*
 * Bind the device if the host gave one (probing runs synchronously here
 * for a device already enumerated).  True: the doorbell is the overflow
 * interrupt.
 */
bool pvperf_doorbell_register(pvperf_overflow_handler_fn handler)
{
	pvperf_doorbell_handler = handler;
	if (pci_register_driver(&pvperf_doorbell_driver))
		return false;
	if (pvperf_doorbell_vectors)
		return true;
	pci_unregister_driver(&pvperf_doorbell_driver);
	return false;
}

void pvperf_doorbell_unregister(void)
{
	pci_unregister_driver(&pvperf_doorbell_driver);
}
