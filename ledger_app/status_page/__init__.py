"""The refund status page a customer opens from a mail: no login, a signed link."""
