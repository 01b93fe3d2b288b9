// The client matrix's scenario for the official `stripe` package for Node, used as a
// client system uses it: an API key and the server's host, port and protocol, every
// other setting the package's own. It takes scenario.py's steps, in the same order with
// the same checks; test_client_matrix.py runs both against a served instance.
//
//   node scenario.js run             # the API steps
//   node scenario.js verify-webhook  # one delivery, checked with stripe.webhooks
//
// Every step prints one JSON line ({"step": ..., "ok": true, ...}); the first failed
// check prints "ok": false with what went wrong and exits 1. It reads what scenario.py
// reads from the environment, and STRIPE_PACKAGE: which installed stripe to require
// (an npm alias in package.json, found through NODE_PATH).
'use strict';

const crypto = require('crypto');
const fs = require('fs');

const Stripe = require(process.env.STRIPE_PACKAGE || 'stripe');

class Failed extends Error {}

function check(condition, what) {
  if (!condition) throw new Failed(what);
}

let lastStep = 'start'; // the last step that passed, named when the next one fails

function emit(step, details = {}) {
  lastStep = step;
  console.log(JSON.stringify({step, ok: true, ...details}));
}

// The API versions the server said it answered these in (its Stripe-Version).
function answeredIn(...objects) {
  return [...new Set(objects.map((o) => o.lastResponse.headers['stripe-version']))].sort();
}

// Every Stripe-Version the package sent, read from its own `request` events.
const sent = new Set();

function client(keyVariable) {
  const base = new URL(process.env.STRIPE_API_BASE);
  const stripe = new Stripe(process.env[keyVariable], {
    host: base.hostname,
    port: Number(base.port),
    protocol: base.protocol.replace(':', ''),
  });
  stripe.on('request', (event) => sent.add(event.api_version));
  return stripe;
}

// The error `call` raised, which must be an instance of `type`.
async function refused(call, type, what) {
  try {
    await call();
  } catch (error) {
    check(error instanceof type, `${what}: ${error && error.type} ${error && error.message}`);
    return error;
  }
  throw new Failed(`${what} was not refused`);
}

async function run() {
  const api = client('STRIPE_API_KEY');
  const limited = client('STRIPE_LIMITED_API_KEY');
  const runId = crypto.randomUUID().replace(/-/g, '').slice(0, 12);
  const version = api.getApiField('version');
  emit('client', {language: 'node', package_version: Stripe.PACKAGE_VERSION, sent: version});

  const charge = await api.charges.create(
    {amount: 5000, currency: 'usd', metadata: {order: runId}},
    {idempotencyKey: `${runId}-charge`}
  );
  check(charge.object === 'charge' && charge.status === 'succeeded', `charge ${charge.id}`);
  check(charge.amount === 5000 && charge.amount_refunded === 0, 'charge amounts');
  check(String(charge.payment_intent).startsWith('pi_'), 'charge without a PaymentIntent');
  emit('charge', {
    id: charge.id,
    payment_intent: charge.payment_intent,
    answered: answeredIn(charge),
  });

  const key = `${runId}-refund-1`;
  const first = await api.refunds.create(
    {charge: charge.id, amount: 1000},
    {idempotencyKey: key}
  );
  const second = await api.refunds.create({charge: charge.id, amount: 500});
  check(
    first.amount === 1000 && first.status === 'succeeded' && first.charge === charge.id,
    'first refund'
  );
  check(second.amount === 500 && second.status === 'succeeded', 'second refund');
  emit('partial_refund', {id: first.id, second: second.id, answered: answeredIn(first, second)});

  const page = await api.refunds.list({charge: charge.id, limit: 1});
  check(page.data.length === 1 && page.data[0].id === second.id && page.has_more, 'first page');
  const walked = [];
  for await (const refund of api.refunds.list({charge: charge.id, limit: 1})) {
    walked.push(refund.id);
  }
  check(
    JSON.stringify(walked) === JSON.stringify([second.id, first.id]),
    `auto-pagination walked ${walked}`
  );
  emit('list_refunds', {walked, answered: answeredIn(page)});

  const byIntent = await api.refunds.create({
    payment_intent: charge.payment_intent,
    amount: 700,
  });
  check(byIntent.charge === charge.id, 'refund by PaymentIntent');
  check(byIntent.payment_intent === charge.payment_intent, 'its payment_intent');
  const listed = await api.refunds.list({payment_intent: charge.payment_intent});
  check(listed.data.some((r) => r.id === byIntent.id), 'listed by PaymentIntent');
  emit('refund_by_payment_intent', {id: byIntent.id, answered: answeredIn(byIntent, listed)});

  const expanded = await api.refunds.retrieve(first.id, {expand: ['charge']});
  check(expanded.charge.object === 'charge' && expanded.charge.id === charge.id, 'expand');
  check(expanded.charge.amount_refunded === 2200, 'expanded amount_refunded');
  emit('expand', {charge: expanded.charge.id, answered: answeredIn(expanded)});

  const waiting = await limited.refunds.create({charge: charge.id, amount: 2000});
  check(
    waiting.status === 'pending' && waiting.ledger_status === 'awaiting_approval',
    'waits'
  );
  const canceled = await limited.refunds.cancel(waiting.id);
  check(canceled.status === 'canceled', 'canceled');
  const again = await refused(
    () => limited.refunds.cancel(waiting.id),
    Stripe.errors.StripeInvalidRequestError,
    'a second cancel'
  );
  check(again.code === 'refund_not_cancelable', `second cancel: ${again.code}`);
  emit('cancel', {id: waiting.id, answered: answeredIn(waiting, canceled)});

  const replayed = await api.refunds.create(
    {charge: charge.id, amount: 1000},
    {idempotencyKey: key}
  );
  check(replayed.id === first.id, 'a replay with the same key made another refund');
  const mismatched = await refused(
    () => api.refunds.create({charge: charge.id, amount: 1500}, {idempotencyKey: key}),
    Stripe.errors.StripeIdempotencyError,
    'the same key with another amount'
  );
  check(mismatched.statusCode === 400, `mismatched retry: ${mismatched.statusCode}`);
  check(mismatched.code === 'idempotency_key_reused', `mismatched retry: ${mismatched.code}`);
  emit('mismatched_retry', {
    code: mismatched.code,
    answered: [mismatched.headers['stripe-version']],
  });

  const declined = await refused(
    () =>
      api.charges.create({amount: 900, currency: 'usd', metadata: {simulate_charge: 'decline'}}),
    Stripe.errors.StripeCardError,
    'the declined charge'
  );
  check(declined.statusCode === 402 && declined.code === 'card_declined', 'declined');
  check(declined.decline_code, 'no decline_code');
  const failed = await api.charges.retrieve(declined.raw.charge);
  check(failed.status === 'failed' && failed.paid === false, 'declined charge');
  emit('declined', {
    decline_code: declined.decline_code,
    charge: declined.raw.charge,
    answered: [declined.headers['stripe-version']],
  });

  const final = await api.charges.retrieve(charge.id);
  check(final.amount_refunded === 2200 && final.refunded === false, 'final balance');
  emit('balance', {amount_refunded: final.amount_refunded, answered: answeredIn(final)});
  emit('sent', {api_versions: [...sent].sort()});
}

async function verifyWebhook() {
  const body = fs.readFileSync(process.env.WEBHOOK_BODY_FILE);
  const signature = process.env.WEBHOOK_SIGNATURE;
  const secret = process.env.WEBHOOK_SECRET;
  const stripe = new Stripe('sk_unused');
  const version = stripe.getApiField('version');
  emit('client', {language: 'node', package_version: Stripe.PACKAGE_VERSION, sent: version});

  const event = stripe.webhooks.constructEvent(body, signature, secret);
  check(event.type === 'refund.created', `event type ${event.type}`);
  check(event.data.object.object === 'refund', 'not a refund');
  check(event.data.object.id === process.env.WEBHOOK_REFUND, 'another refund');
  const changes = [
    [Buffer.concat([body, Buffer.from(' ')]), secret, 'body'],
    [body, `${secret}x`, 'secret'],
  ];
  for (const [changed, key, what] of changes) {
    const error = await refused(
      async () => stripe.webhooks.constructEvent(changed, signature, key),
      Stripe.errors.StripeSignatureVerificationError,
      `a changed ${what}`
    );
    check(error, what);
  }
  emit('webhook', {event: event.id, type: event.type, refund: event.data.object.id});
}

async function main(mode) {
  const steps = {run, 'verify-webhook': verifyWebhook};
  try {
    await steps[mode]();
  } catch (error) {
    const message = `${error && error.constructor && error.constructor.name}: ${error && error.message}`;
    console.log(JSON.stringify({step: 'failed', ok: false, after: lastStep, error: message}));
    return 1;
  }
  emit('done');
  return 0;
}

main(process.argv[2] || 'run').then((code) => {
  process.exitCode = code;
});
