// SPDX-License-Identifier: GPL-2.0
/*
 * PROTOTYPE (groundwork for the arm64 port; may be rewritten): the
 * overflow interrupt without NMIs.  QMP inject-nmi answers "machine does
 * not provide NMIs" on -M virt, so the host needs another way to interrupt
 * the arm64 guest.  This binds QEMU's ivshmem-doorbell PCI device
 * (1af4:1110), takes one MSI-X vector (GICv3 ITS or GICv2m on virt) and,
 * in the handler, bumps a counter in the device's shared memory (BAR2) so
 * the host sees each interrupt arrive (ivshmem-ping.py measures the round
 * trip eventfd write -> guest handler -> shared memory).
 */
#include <linux/interrupt.h>
#include <linux/io.h>
#include <linux/module.h>
#include <linux/pci.h>

struct ivirq {
	u32 __iomem *shm;	/* BAR2: [0] = interrupts handled */
	u32 count;
	int irq;
};

static irqreturn_t ivirq_handler(int irq, void *data)
{
	struct ivirq *iv = data;

	iv->count++;
	writel(iv->count, iv->shm);
	return IRQ_HANDLED;
}

static int ivirq_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
	struct ivirq *iv;
	int err;

	iv = devm_kzalloc(&pdev->dev, sizeof(*iv), GFP_KERNEL);
	if (!iv)
		return -ENOMEM;
	err = pcim_enable_device(pdev);
	if (err)
		return err;
	/* An MSI is a memory write by the device: without bus mastering
	 * QEMU drops it (checked: no interrupt arrived without this). */
	pci_set_master(pdev);
	iv->shm = pcim_iomap(pdev, 2, 0);
	if (!iv->shm)
		return -ENOMEM;
	err = pci_alloc_irq_vectors(pdev, 1, 1, PCI_IRQ_MSIX);
	if (err < 0)
		return err;
	iv->irq = pci_irq_vector(pdev, 0);
	err = request_irq(iv->irq, ivirq_handler, 0, "ivirq", iv);
	if (err) {
		pci_free_irq_vectors(pdev);
		return err;
	}
	pci_set_drvdata(pdev, iv);
	pr_info("ivirq: MSI-X vector 0 is irq %d\n", iv->irq);
	return 0;
}

static void ivirq_remove(struct pci_dev *pdev)
{
	struct ivirq *iv = pci_get_drvdata(pdev);

	free_irq(iv->irq, iv);
	pci_free_irq_vectors(pdev);
	pr_info("ivirq: %u interrupts\n", iv->count);
}

static const struct pci_device_id ivirq_ids[] = {
	{ PCI_DEVICE(0x1af4, 0x1110) },
	{ }
};
MODULE_DEVICE_TABLE(pci, ivirq_ids);

static struct pci_driver ivirq_driver = {
	.name = "ivirq",
	.id_table = ivirq_ids,
	.probe = ivirq_probe,
	.remove = ivirq_remove,
};
module_pci_driver(ivirq_driver);
MODULE_LICENSE("GPL");
